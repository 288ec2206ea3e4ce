"""What a job may run: the built-in workloads, their declared options, and the operator's allowlist.

This is contract, not trainer: the API checks a spec against it at submit (it may not import the
trainer or torch), and the trainer checks the same rules again before it imports anything a spec
names. A workload is either a built-in name (`gpt`, `resnet`) or `pkg.mod:attr`, allowed only when
the module sits under a prefix the operator configured.

A workload declares its options as `WorkloadOption`s; `parse_options` turns `TrainerSpec.args`
into the values its builder uses (defaults filled in) or reports every option that is wrong. An
operator-allowed module may declare its own in a module-level `OPTIONS`; the trainer then checks
its args the same way when it starts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

OptionType = Literal["int", "float", "bool", "str"]
OptionValue = int | float | bool | str

# A dotted module path; an allowed prefix must be one too, so that an empty or malformed prefix
# can never allow everything.
MODULE_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class WorkloadOption:
    name: str
    type: OptionType
    default: OptionValue
    description: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class OptionProblem:
    option: str
    reason: str


class OptionsError(ValueError):
    """One or more options are wrong; `problems` names each."""

    def __init__(self, problems: Sequence[OptionProblem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(f"option {p.option}: {p.reason}" for p in self.problems))


def _check_value(opt: WorkloadOption, value: Any) -> tuple[OptionValue | None, str | None]:
    """The value converted to the option's type, or why it is not acceptable."""
    if opt.type == "bool":
        return (value, None) if isinstance(value, bool) else (None, "must be a boolean")
    if opt.type == "str":
        if not isinstance(value, str):
            return None, "must be a string"
        if opt.choices is not None and value not in opt.choices:
            return None, "must be one of " + ", ".join(opt.choices)
        return value, None
    # JSON has no int/bool distinction that survives every parser: refuse bools explicitly.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"must be {'an integer' if opt.type == 'int' else 'a number'}"
    if opt.type == "int" and not isinstance(value, int):
        return None, "must be an integer"
    if not math.isfinite(value):
        return None, "must be a finite number"
    number: int | float = value if opt.type == "int" else float(value)
    if opt.minimum is not None and number < opt.minimum:
        return None, f"must be >= {_fmt(opt.minimum)}"
    if opt.maximum is not None and number > opt.maximum:
        return None, f"must be <= {_fmt(opt.maximum)}"
    return number, None


def _fmt(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def parse_options(options: Iterable[WorkloadOption], args: Mapping[str, Any]) -> dict[str, Any]:
    """Every declared option's value (the given one, else its default); raises OptionsError
    naming each unknown, mistyped, non-finite or out-of-bounds option."""
    declared = {opt.name: opt for opt in options}
    problems: list[OptionProblem] = []
    known = ", ".join(sorted(declared)) or "none"
    for name in sorted(set(args) - set(declared)):
        problems.append(OptionProblem(name, f"unknown option; known: {known}"))
    values: dict[str, Any] = {}
    for name, opt in declared.items():
        if name not in args:
            values[name] = opt.default
            continue
        value, reason = _check_value(opt, args[name])
        if reason is not None:
            problems.append(OptionProblem(name, reason))
        else:
            values[name] = value
    if problems:
        raise OptionsError(problems)
    return values


# Every rank of a job holds the whole model (the trainer runs DDP; nothing is sharded): its
# weights and gradients in fp32 and Adam's two moments, 16 bytes a parameter before a single
# activation. MAX_PARAMETERS is what one GPU of the largest in the price catalog (B200, 180 GiB)
# holds at that; a built-in's options may ask for no more, so a model that cannot train anywhere
# is refused at submit (and again by the trainer, which has no catalog) instead of failing at
# runtime. tests/test_workloads.py holds it to the catalog.
BYTES_PER_PARAMETER = 16
MAX_PARAMETERS = 12_000_000_000
BYTE_VOCAB = 256  # the gpt workload reads bytes


@dataclass(frozen=True)
class BuiltinWorkload:
    name: str
    description: str
    options: tuple[WorkloadOption, ...]
    # The model's parameter count from its options (exactly what the trainer builds), and the
    # option a model too large is reported on.
    parameters: Callable[[Mapping[str, Any]], int]
    size_option: str
    # Rules across options that bounds cannot say; returns the problems found.
    rules: Callable[[Mapping[str, Any]], list[OptionProblem]] = field(default=lambda _: [])

    def parse(self, args: Mapping[str, Any]) -> dict[str, Any]:
        values = parse_options(self.options, args)
        problems = self.rules(values) or self._size(values)
        if problems:
            raise OptionsError(problems)
        return values

    def _size(self, values: Mapping[str, Any]) -> list[OptionProblem]:
        count = self.parameters(values)
        if count <= MAX_PARAMETERS:
            return []
        return [
            OptionProblem(
                self.size_option,
                f"the model would hold {count:.3g} parameters; one GPU of the largest here "
                f"trains at most {MAX_PARAMETERS:.3g} ({BYTES_PER_PARAMETER} bytes each: "
                "weights, gradients and Adam's two moments, on every rank)",
            )
        ]


def _gpt_rules(values: Mapping[str, Any]) -> list[OptionProblem]:
    if values["n_embd"] % values["n_head"]:
        return [OptionProblem("n_embd", f"must be a multiple of n_head ({values['n_head']})")]
    return []


def _gpt_parameters(values: Mapping[str, Any]) -> int:
    """trainer.workloads.gpt.GPT's: token (tied with the head) and position embeddings, the
    final norm, and per block two norms, attention (qkv, proj) and the 4x MLP, with biases."""
    width, layers = values["n_embd"], values["n_layer"]
    embeddings = width * (BYTE_VOCAB + values["block_size"] + 2)
    return int(embeddings + layers * (12 * width * width + 13 * width))


def _resnet_rules(values: Mapping[str, Any]) -> list[OptionProblem]:
    # Each stage normalizes in groups of 8 channels (trainer.workloads.resnet.norm): a width
    # whose stages cannot be split so built a model that failed when the trainer started.
    width = values["width"]
    for stage in range(values["stages"]):
        channels = width * 2**stage
        if channels > 8 and channels % 8:
            return [
                OptionProblem(
                    "width",
                    f"stage {stage} would have {channels} channels (width x 2^stage): "
                    "a stage wider than 8 channels must have a multiple of 8",
                )
            ]
    return []


def _resnet_parameters(values: Mapping[str, Any]) -> int:
    """trainer.workloads.resnet.ResNet's: the stem, two 3x3 convolutions and two GroupNorms a
    block (a 1x1 shortcut where the shape changes), each stage twice as wide, and the head."""
    width, per_stage = values["width"], values["blocks_per_stage"]
    count = 27 * width + 2 * width
    channels = width
    for stage in range(values["stages"]):
        out = width * 2**stage
        for i in range(per_stage):
            count += 9 * channels * out + 9 * out * out + 4 * out
            if (stage > 0 and i == 0) or channels != out:
                count += channels * out + 2 * out
            channels = out
    return int(count + channels * values["num_classes"] + values["num_classes"])


GPT = BuiltinWorkload(
    name="gpt",
    description="A small GPT-style byte-level language model on text found offline.",
    options=(
        WorkloadOption("block_size", "int", 64, "Context length in bytes.", 2, 65_536),
        WorkloadOption("n_layer", "int", 2, "Transformer blocks.", 1, 1024),
        WorkloadOption("n_head", "int", 4, "Attention heads per block.", 1, 1024),
        WorkloadOption("n_embd", "int", 64, "Embedding width; a multiple of n_head.", 1, 1_048_576),
        WorkloadOption("dropout", "float", 0.0, "Dropout probability.", 0.0, 0.99),
        WorkloadOption(
            "corpus",
            "str",
            "",
            "Files or directories to train on, joined with the OS path separator; empty: the "
            "standard library of the Python the trainer runs on (another Python reads other "
            "text: name the files when runs must match across machines). Read with the "
            "trainer's own permissions.",
        ),
        WorkloadOption("corpus_glob", "str", "*.py", "Files to read inside corpus directories."),
        WorkloadOption(
            "corpus_bytes", "int", 1_000_000, "Bytes of corpus to read at most.", 1, 2**40
        ),
    ),
    parameters=_gpt_parameters,
    size_option="n_embd",
    rules=_gpt_rules,
)

RESNET = BuiltinWorkload(
    name="resnet",
    description="A small ResNet on a deterministic synthetic image dataset.",
    options=(
        WorkloadOption("width", "int", 16, "Channels of the first stage.", 1, 4096),
        WorkloadOption("blocks_per_stage", "int", 1, "Residual blocks per stage.", 1, 256),
        WorkloadOption("stages", "int", 3, "Stages; each halves the resolution.", 1, 16),
        WorkloadOption("num_classes", "int", 10, "Classes of the synthetic dataset.", 2, 100_000),
        WorkloadOption("image_size", "int", 16, "Image side in pixels.", 4, 4096),
        WorkloadOption("dataset_size", "int", 4096, "Items in the dataset.", 1, 2**40),
        WorkloadOption("data_seed", "int", 0, "Seed of the synthetic data.", 0, 2**32 - 1),
    ),
    parameters=_resnet_parameters,
    size_option="width",
    rules=_resnet_rules,
)

BUILTIN_WORKLOADS: dict[str, BuiltinWorkload] = {w.name: w for w in (GPT, RESNET)}


def valid_prefix(prefix: str) -> bool:
    return bool(MODULE_PATH.match(prefix))


def module_allowed(module: str, prefixes: Iterable[str]) -> bool:
    """A prefix matches whole dotted components: `acme` allows `acme.x`, not `acmeevil`."""
    return any(valid_prefix(p) and (module == p or module.startswith(p + ".")) for p in prefixes)


def refusal(workload: str, prefixes: Iterable[str]) -> str | None:
    """Why a job may not run `workload` here, or None when it may."""
    if workload in BUILTIN_WORKLOADS:
        return None
    module, sep, attr = workload.partition(":")
    builtins = ", ".join(BUILTIN_WORKLOADS)
    if not sep:
        return f"unknown workload {workload!r}: use a built-in ({builtins}) or `pkg.mod:build`"
    if not MODULE_PATH.match(module) or not attr.isidentifier():
        return f"{workload!r} is not `pkg.mod:function`"
    allowed = sorted(set(prefixes))
    if not module_allowed(module, allowed):
        shown = ", ".join(allowed) if allowed else "none"
        return (
            f"module {module!r} is not allowed on this deployment; use a built-in ({builtins}) "
            f"or a module under an operator-allowed prefix ({shown})"
        )
    return None


def problems(
    workload: str, args: Mapping[str, Any], prefixes: Iterable[str]
) -> list[tuple[str, str]]:
    """(field, reason) for each problem with a trainer's workload and its args, as the API
    sees them: an allowed module's own options are checked where it is imported (the trainer)."""
    reason = refusal(workload, prefixes)
    if reason is not None:
        return [("trainer.workload", reason)]
    builtin = BUILTIN_WORKLOADS.get(workload)
    if builtin is None:
        return []
    try:
        builtin.parse(args)
    except OptionsError as exc:
        return [(f"trainer.args.{p.option}", p.reason) for p in exc.problems]
    return []
