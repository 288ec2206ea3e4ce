"""The contract's workload rules: built-ins, operator prefixes, declared options, the examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpujobs import progress
from gpujobs.client import load_spec
from gpujobs.workloads import (
    BUILTIN_WORKLOADS,
    OptionsError,
    WorkloadOption,
    module_allowed,
    parse_options,
    problems,
    refusal,
)

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))


def test_a_prefix_matches_whole_dotted_components() -> None:
    assert module_allowed("acme", ["acme"])
    assert module_allowed("acme.models.gpt", ["acme"])
    assert not module_allowed("acmeevil", ["acme"])
    assert not module_allowed("acme", ["acme.models"])
    # An empty or malformed prefix never allows everything.
    assert not module_allowed("os", [""])
    assert not module_allowed("os", ["."])
    assert not module_allowed("os", ["*"])


def test_only_builtins_without_prefixes() -> None:
    assert refusal("gpt", []) is None and refusal("resnet", []) is None
    assert "not allowed" in (refusal("subprocess:getoutput", []) or "")
    assert "unknown workload" in (refusal("bert", ["bert"]) or "")
    assert refusal("acme.models:build", ["acme"]) is None


OPTIONS = [
    WorkloadOption("n", "int", 1, "", 1, 10),
    WorkloadOption("lr", "float", 0.1, "", 0.0, 1.0),
    WorkloadOption("on", "bool", False, ""),
    WorkloadOption("mode", "str", "a", "", choices=("a", "b")),
]


def test_parse_options_fills_defaults_and_converts_ints_to_floats() -> None:
    assert parse_options(OPTIONS, {"lr": 1}) == {"n": 1, "lr": 1.0, "on": False, "mode": "a"}
    assert isinstance(parse_options(OPTIONS, {"lr": 1})["lr"], float)


@pytest.mark.parametrize(
    ("args", "option", "reason"),
    [
        ({"nn": 1}, "nn", "unknown option"),
        ({"n": 1.0}, "n", "must be an integer"),
        ({"n": True}, "n", "must be an integer"),
        ({"n": "1"}, "n", "must be an integer"),
        ({"n": 11}, "n", "must be <= 10"),
        ({"lr": float("inf")}, "lr", "must be a finite number"),
        ({"lr": -0.5}, "lr", "must be >= 0"),
        ({"on": 1}, "on", "must be a boolean"),
        ({"mode": "c"}, "mode", "must be one of a, b"),
    ],
)
def test_parse_options_names_each_wrong_option(
    args: dict[str, Any], option: str, reason: str
) -> None:
    with pytest.raises(OptionsError) as info:
        parse_options(OPTIONS, args)
    assert [(p.option, reason in p.reason) for p in info.value.problems] == [(option, True)]


def test_problems_are_fields_of_the_spec() -> None:
    assert problems("gpt", {"n_layers": 2, "dropout": 2.0}, []) == [
        (
            "trainer.args.n_layers",
            "unknown option; known: "
            + ", ".join(sorted(o.name for o in BUILTIN_WORKLOADS["gpt"].options)),
        ),
        ("trainer.args.dropout", "must be <= 0.99"),
    ]
    # An allowed module's options are checked where it is imported: the trainer.
    assert problems("acme.models:build", {"whatever": 1}, ["acme"]) == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_run_builtins_with_declared_options(path: Path) -> None:
    spec = load_spec(path)
    assert problems(spec.trainer.workload, spec.trainer.args, []) == []


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("gpt", {}),
        ("gpt", {"n_layer": 3, "n_embd": 48, "n_head": 3, "block_size": 17}),
        ("resnet", {}),
        ("resnet", {"width": 24, "stages": 4, "blocks_per_stage": 2, "num_classes": 7}),
        ("resnet", {"width": 5, "stages": 1, "blocks_per_stage": 3}),
        ("resnet", {"width": 8, "stages": 1, "num_classes": 3}),
    ],
)
def test_a_builtins_parameter_count_is_the_built_models(name: str, args: dict[str, Any]) -> None:
    """The count the API bounds at submit is the one the trainer builds (torch counts it)."""
    torch = pytest.importorskip("torch")
    from trainer.workloads.gpt import GPT
    from trainer.workloads.resnet import ResNet

    workload = BUILTIN_WORKLOADS[name]
    values = workload.parse(args)
    model: torch.nn.Module
    if name == "gpt":
        keys = ("block_size", "n_layer", "n_head", "n_embd", "dropout")
        model = GPT(**{k: values[k] for k in keys})
    else:
        keys = ("width", "blocks_per_stage", "stages", "num_classes")
        model = ResNet(**{k: values[k] for k in keys})
    assert workload.parameters(values) == sum(p.numel() for p in model.parameters())


def test_the_parameter_cap_fits_the_largest_gpu_in_the_catalog() -> None:
    """MAX_PARAMETERS is stated in the contract (the trainer checks it without the catalog):
    it must still be what one GPU of the catalog's largest can train."""
    from api.pricing.catalog import default_catalog
    from gpujobs.workloads import BYTES_PER_PARAMETER, MAX_PARAMETERS

    largest = max(o.gpu_memory_gb or 0.0 for o in default_catalog().offers)
    assert largest * 2**30 >= MAX_PARAMETERS * BYTES_PER_PARAMETER
    assert 0.9 * largest * 2**30 < MAX_PARAMETERS * BYTES_PER_PARAMETER
    # A checkpoint's stall is bounded by twice writing that model's state at 100 MB/s.
    saved = MAX_PARAMETERS * progress.SAVED_BYTES_PER_PARAMETER
    assert saved / 100e6 <= progress.MAX_CHECKPOINT_STALL_S / 2
