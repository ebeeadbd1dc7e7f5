"""A training step runs out of GPU memory (CUDA OOM) as the batch grows.

crashlens-repro: id=cuda_oom class=cuda_oom ranks=1 gpu=yes launcher=python timeout=120

A small MLP trains on one GPU with a batch that doubles every step (as a too-large batch size,
sequence length or a growing cache does). The activations kept for backward soon exceed the
memory this process may use and the caching allocator raises "torch.OutOfMemoryError: CUDA out
of memory. Tried to allocate N GiB". --memory-fraction caps the process below the whole GPU
(torch.cuda.set_per_process_memory_fraction) so it fails fast and leaves a shared GPU usable.
"""

import argparse
import logging

import torch

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=4096, help="first step's batch size")
    parser.add_argument("--growth", type=float, default=2.0, help="batch size factor per step")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--memory-fraction", type=float, default=0.5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    torch.cuda.set_per_process_memory_fraction(args.memory_fraction, device)
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.hidden, 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    logger.info(
        "training on %s (%s), memory fraction %.2f",
        device,
        torch.cuda.get_device_name(device),
        args.memory_fraction,
    )
    batch_size = args.batch_size
    for step in range(args.steps):
        x = torch.randn(batch_size, args.hidden, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        logger.info(
            "step %d batch_size %d loss %.4f max_allocated %.2f GiB",
            step,
            batch_size,
            loss.item(),
            torch.cuda.max_memory_allocated(device) / 1024**3,
        )
        batch_size = int(batch_size * args.growth)
    logger.info("training finished")


if __name__ == "__main__":
    main()
