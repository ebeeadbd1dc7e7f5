"""Whose code a traceback frame is: the user's, the standard library's or an installed package's.

Decided from what the path *means*, not from a prefix list: the package segments a path
names (``torch/``, ``site-packages/x``, an editable checkout's ``transformers/src/
transformers/``), the interpreter's own tree (``lib/python3.11/``, ``<frozen os>``),
compiled and generated sources (``.pxi``, ``.pyx``, ``.so``), console scripts of installed
packages (``bin/torchrun``). The script the user launched is theirs wherever it lives: a
traceback's outermost ``<module>`` frame, unless it is a console script or ``runpy`` ran a
module (see :func:`launched_script`).

This module has no dependencies inside crashlens: the parser, the model and the report all
ask it the same question.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal, Protocol

from crashlens import lazyre

Provenance = Literal["user", "library", "stdlib", "other"]

#: Import names of distributions a training job's tracebacks pass through. A path whose
#: package segment is one of these (installed, relative, or an editable checkout) is theirs.
KNOWN_PACKAGES = frozenset(
    (
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "torchdata",
        "torchelastic",
        "functorch",
        "triton",
        "transformers",
        "accelerate",
        "datasets",
        "tokenizers",
        "safetensors",
        "huggingface_hub",
        "peft",
        "trl",
        "evaluate",
        "diffusers",
        "optimum",
        "timm",
        "sentence_transformers",
        "deepspeed",
        "apex",
        "megatron",
        "bitsandbytes",
        "xformers",
        "flash_attn",
        "vllm",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "lightning_utilities",
        "torchmetrics",
        "numpy",
        "pandas",
        "pyarrow",
        "scipy",
        "sklearn",
        "PIL",
        "cv2",
        "h5py",
        "numba",
        "cupy",
        "jax",
        "jaxlib",
        "flax",
        "optax",
        "tensorflow",
        "keras",
        "horovod",
        "ray",
        "colossalai",
        "fairscale",
        "fairseq",
        "mmcv",
        "mmengine",
        "mmdet",
        "detectron2",
        "wandb",
        "mlflow",
        "tensorboard",
        "tensorboardX",
        "tqdm",
        "rich",
        "click",
        "typer",
        "yaml",
        "omegaconf",
        "hydra",
        "fsspec",
        "s3fs",
        "gcsfs",
        "boto3",
        "botocore",
        "requests",
        "urllib3",
        "aiohttp",
        "multiprocess",
        "dill",
        "cloudpickle",
        "filelock",
        "pydantic",
        "jinja2",
        "sentencepiece",
        "tiktoken",
        "regex",
        "msgpack",
        "zmq",
        "google",
        "grpc",
        "protobuf",
        "onnx",
        "onnxruntime",
        "tensorrt",
        "nvidia",
        "pynvml",
        "psutil",
        "packaging",
        "setuptools",
        "pkg_resources",
        "pip",
        "importlib_metadata",
        "six",
        "attr",
        # fine-tuning frameworks users run rather than write
        "llamafactory",
        "axolotl",
        "unsloth",
        "unsloth_zoo",
        "swift",
        "xtuner",
        "nemo",
        "torchtune",
        "composer",
        "llmfoundry",
        "litgpt",
        "open_clip",
        "fastchat",
        "ultralytics",
        "mmpretrain",
        "mmseg",
        "mmdet3d",
    )
)
#: Directories that hold installed packages.
_INSTALL_DIRS = frozenset({"site-packages", "dist-packages", ".eggs", "__pypackages__"})
#: A Windows drive (``C:``): the paths where the stdlib sits in ``<prefix>\\Lib``.
_WINDOWS_PREFIX = lazyre.compile(r"[A-Za-z]:$")
#: A Python version directory (``python3.11``, ``python3.8``, ``python312`` on Windows).
_PYTHON_DIR = lazyre.compile(r"python\d(?:\.?\d+)?t?$", re.IGNORECASE)
#: Sources that are a package's compiled or generated code, never a user's script.
_NATIVE_SUFFIXES = (".pxi", ".pyx", ".pxd", ".so", ".pyd", ".c", ".cc", ".cpp", ".cu", ".h")
#: Pseudo-files: what the interpreter runs from memory.
_USER_PSEUDO = ("<stdin>", "<ipython-input", "<ipython-cell", "<cell")


def _segments(path: str) -> list[str]:
    return [s for s in path.replace("\\", "/").split("/") if s and s != "."]


def _norm(name: str) -> str:
    """A name as package and checkout names compare: ``LLaMA-Factory`` ~ ``llamafactory``,
    ``unsloth-zoo`` ~ ``unsloth_zoo``."""
    return name.lower().replace("-", "").replace("_", "").replace(".", "")


@lru_cache(maxsize=8192)
def provenance(path: str) -> Provenance:
    """Whose code ``path`` (a frame's ``File "..."``) is, from the path alone.

    ``other`` is code no one wrote to a file (``<string>``, ``<lambda>``): it is neither the
    user's nor a package's, and never shown as "your code".
    """
    if path.startswith("<"):
        if path.startswith("<frozen"):
            return "stdlib"
        return "user" if path.startswith(_USER_PSEUDO) else "other"
    if path.endswith(_NATIVE_SUFFIXES):
        return "library"
    parts = _segments(path)
    if not parts:
        return "other"
    dirs, name = parts[:-1], parts[-1]
    if any(d in _INSTALL_DIRS or d.endswith(".egg") for d in dirs):
        return "library"
    if _in_conda_pkgs(dirs):
        return "library"
    if _under_python_lib(dirs, name):
        return "stdlib"
    if dirs and dirs[-1] == "bin" and not name.endswith(".py"):
        return "library"  # a console script (``/usr/local/bin/torchrun``)
    if _names_known_package(path, dirs):
        return "library"
    return "user"


def module_parts(path: str) -> tuple[str, ...]:
    """The module a frame's ``path`` is, as far as the path says: an installed package's
    module from the package down (``.../site-packages/transformers/trainer.py`` ->
    ``("transformers", "trainer")``), the stdlib's by its name (``<frozen runpy>`` ->
    ``("runpy",)``), a known package's from its segment down; anything else (the user's
    script, a pseudo-file) by its file's stem alone. Where the file sits on one machine
    (home directories, environment names, Python versions) is not part of it."""
    if path.startswith("<"):
        return (path[8:].rstrip(">").strip(),) if path.startswith("<frozen ") else ()
    parts = _segments(path)
    if not parts:
        return ()
    dirs, stem = parts[:-1], parts[-1].rpartition(".")[0] or parts[-1]
    starts = [i + 1 for i, d in enumerate(dirs) if d in _INSTALL_DIRS or d.endswith(".egg")]
    starts += [
        i + 2
        for i, d in enumerate(dirs[:-1])
        if d.lower() in ("lib", "lib64") and _PYTHON_DIR.match(dirs[i + 1])
    ]
    if not starts:
        # a known package's checkout or relative path: from its last segment of that name
        starts = [i for i, d in enumerate(dirs) if d in KNOWN_PACKAGES][-1:]
    start = max(starts, default=len(dirs))
    return tuple(d for d in (*dirs[start:], stem) if d != "__init__")


def _in_conda_pkgs(dirs: list[str]) -> bool:
    """``.../pkgs/<name>-<version>-<build>/...``: conda's package cache."""
    return any(d == "pkgs" and i + 1 < len(dirs) and "-" in dirs[i + 1] for i, d in enumerate(dirs))


def _under_python_lib(dirs: list[str], name: str) -> bool:
    """``lib/python3.11/`` (or Windows ``Lib/``): the interpreter's standard library."""
    for i, d in enumerate(dirs):
        if d.lower() in ("lib", "lib64") and i + 1 < len(dirs) and _PYTHON_DIR.match(dirs[i + 1]):
            return True
    # ``C:\Python311\Lib\os.py``: Windows keeps the stdlib directly in ``Lib``; so does
    # each conda environment (``D:\Anaconda3\envs\x\lib\json\decoder.py``), where only the
    # module's name after ``Lib`` tells it from a project's own ``lib`` folder.
    for i, d in enumerate(dirs):
        if d.lower() != "lib" or i == 0:
            continue
        if d == "Lib" and _PYTHON_DIR.match(dirs[i - 1]):
            return True
        after = dirs[i + 1] if i + 1 < len(dirs) else name.rpartition(".")[0]
        if _WINDOWS_PREFIX.match(dirs[0]) and after in sys.stdlib_module_names:
            return True
    return False


def _names_known_package(path: str, dirs: list[str]) -> bool:
    """A known package's own files: by a relative path that starts in it (``torch/nn/...``,
    as launchers and some builds print them), or inside a checkout of it (``transformers/src/
    transformers/``, ``DeepSpeed/deepspeed/``, ``/opt/pytorch/torch/``)."""
    relative = not path.replace("\\", "/").startswith(("/", "~")) and ":" not in path[:3]
    for i, d in enumerate(dirs):
        if d not in KNOWN_PACKAGES:
            continue
        if relative and i == 0:
            return True
        if i == 0:
            continue
        parent = dirs[i - 1]
        if parent == "src" and i >= 2:
            parent = dirs[i - 2]
        owner = _norm(parent)
        pkg = _norm(d)
        if pkg in owner or owner in ("pytorch", "packages"):
            return True
    return False


class FrameLike(Protocol):
    """What :func:`launched_script` reads of a frame."""

    @property
    def file(self) -> str: ...

    @property
    def function(self) -> str: ...


#: The interpreter's module runner: ``python -m pkg`` frames start in it.
_RUNPY = ("runpy.py", "<frozen runpy>")


#: What ``multiprocessing`` runs a spawned child's bootstrap with (``python -c "from
#: multiprocessing.spawn import spawn_main; ..."``): its ``<string>`` is nobody's script.
_BOOTSTRAPS = ("multiprocessing/spawn.py", "multiprocessing/forkserver.py")


def launched_script(frames: Sequence[FrameLike]) -> str | None:
    """The script the process was started with, when the traceback shows it: its outermost
    frame, a ``<module>`` in a ``.py`` file that no module runner or console script called, or
    the code given to ``python -c``. That code is the user's wherever it is installed."""
    if not frames:
        return None
    first = frames[0]
    if first.function != "<module>":
        return None
    if first.file == "<string>":
        spawned = len(frames) > 1 and frames[1].file.replace("\\", "/").endswith(_BOOTSTRAPS)
        return None if spawned else first.file
    if first.file.startswith("<") or first.file.endswith(_RUNPY):
        return None
    if _names_known_package(first.file, _segments(first.file)[:-1]):
        # A known package's module at the bottom of the stack (an import in a spawned worker,
        # a paste that lost the frames above it) is that package's, not a script of the user's.
        return None
    return first.file if first.file.endswith(".py") else None


def is_user_path(path: str) -> bool:
    """Whether a frame's file is the user's code (see :func:`provenance`)."""
    return provenance(path) == "user"
