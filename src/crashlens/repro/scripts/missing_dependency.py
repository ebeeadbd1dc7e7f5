"""The training script imports an optional package that this environment does not have.

crashlens-repro: id=missing_dependency class=missing_dependency ranks=1 gpu=no launcher=python

The model code uses a fused attention kernel from a separately installed package when asked
to (`--attn flash`), and the job's environment (a fresh container, another conda env, a node
whose image lags) does not have it: "ModuleNotFoundError: No module named 'flash_attn'".
"""

import argparse
import importlib
import logging

import torch

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def attention_impl(name: str):
    if name == "flash":
        module = importlib.import_module("flash_attn")
        return module.flash_attn_func
    return torch.nn.functional.scaled_dot_product_attention


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--attn", default="flash")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    logger.info("building the model with attention=%s", args.attn)
    attn = attention_impl(args.attn)
    q = torch.randn(1, 2, 4, 8)
    logger.info("attention output %s", tuple(attn(q, q, q).shape))


if __name__ == "__main__":
    main()
