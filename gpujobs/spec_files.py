"""Job spec files as the SDK and the CLI read them: YAML or JSON, within bounds, checked against
the contract (`gpujobs.spec.JobSpec`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpujobs import errors
from gpujobs.spec import JobSpec

SpecSource = JobSpec | dict[str, Any] | str | Path


# A spec file is read within bounds: the server takes no larger body (GPUJOBS_MAX_BODY_BYTES
# default), and a spec is a few dozen values, so a document whose aliases expand it past
# MAX_SPEC_VALUES is a bomb (nine aliases nine deep are 9^9 values: the CLI hung validating them).
MAX_SPEC_BYTES = 1024 * 1024
MAX_SPEC_VALUES = 100_000


def load_spec(source: SpecSource) -> JobSpec:
    """A JobSpec from a model, a dict, or a YAML/JSON file path, checked against the contract."""
    if isinstance(source, JobSpec):
        return source
    if isinstance(source, str | Path):
        source = _read_spec_file(Path(source).expanduser())
    try:
        return JobSpec.model_validate(source)
    except ValidationError as error:
        raise errors.from_validation_error(error) from error


def _read_spec_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            text = file.read(MAX_SPEC_BYTES + 1)
    except OSError as error:
        raise errors.InvalidSpec(
            f"cannot read {path}: {error.strerror or error}", code="unreadable_spec"
        ) from error
    if len(text) > MAX_SPEC_BYTES:
        raise errors.InvalidSpec(
            f"{path} is larger than {MAX_SPEC_BYTES} bytes; a job spec is far smaller",
            code="invalid_spec",
        )
    try:
        _check_expansion(yaml.compose(text, Loader=yaml.SafeLoader), path)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise errors.InvalidSpec(
            f"{path} is not valid YAML: {error}", code="invalid_yaml"
        ) from error
    except RecursionError as error:
        raise errors.InvalidSpec(f"{path} is nested too deeply", code="invalid_yaml") from error
    if not isinstance(data, dict):
        raise errors.InvalidSpec(f"{path} must hold a mapping (a job spec)", code="invalid_spec")
    return data


def _check_expansion(root: yaml.Node | None, path: Path) -> None:
    """Refuse a document whose aliases expand it past MAX_SPEC_VALUES values, or make it
    contain itself. An alias is the node it names, so each node's expanded size is counted
    once: a bomb is measured without being expanded."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise errors.InvalidSpec(
                f"{path}: its aliases make the document contain itself", code="invalid_yaml"
            )
        open_nodes.add(key)
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        total = 1 + sum(size(child) for child in children)
        if total > MAX_SPEC_VALUES:
            raise errors.InvalidSpec(
                f"{path}: its aliases expand it to more than {MAX_SPEC_VALUES} values; a job "
                "spec has a few dozen",
                code="invalid_yaml",
            )
        open_nodes.discard(key)
        sizes[key] = total
        return total

    if root is not None:
        size(root)
