"""Which Kubernetes API calls the launcher can make, read from its code.

A static read: every `self._batch.<method>` / `self._core.<method>` / `self._custom.<method>`
(Kueue's Workloads) the launcher's methods call or pass on
(`self._create(self._core.create_namespaced_secret, ...)`), following calls between its own
methods from the entry points. Each client method is then resolved to the REST call it
makes (path and HTTP method, from the official client's own source) and named as RBAC names it:
(API group, resource[/subresource], verb), and whether it is namespaced.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from functools import cache

from kubernetes import client

from worker.launchers.kubernetes import kueue
from worker.launchers.kubernetes import launcher as launcher_module

CLIENTS = {
    "_batch": client.BatchV1Api,
    "_core": client.CoreV1Api,
    "_custom": client.CustomObjectsApi,
}
# The one custom resource the launcher reads through CustomObjectsApi, whose paths are templates.
_CUSTOM = {"{group}": kueue.GROUP, "{version}": kueue.VERSION, "{plural}": kueue.WORKLOADS}
_CALL_API = re.compile(r"call_api\(\s*'([^']+)',\s*'(\w+)'")


@dataclass(frozen=True, order=True)
class Call:
    group: str
    resource: str
    verb: str
    namespaced: bool


def rest_call(api: type, method: str) -> Call:
    source = inspect.getsource(getattr(api, f"{method}_with_http_info"))
    ((path, http_method),) = _CALL_API.findall(source)
    for template, value in _CUSTOM.items():
        path = path.replace(template, value)
    return call_of(path, http_method)


def call_of(path: str, http_method: str) -> Call:
    """The RBAC name of a REST request, e.g. GET /api/v1/namespaces/ns/pods/p/log."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    namespaced = len(rest) > 2 and rest[0] == "namespaces"
    if namespaced:
        rest = rest[2:]
    resource, named, sub = rest[0], len(rest) > 1, rest[2:]
    if sub:
        resource = f"{resource}/{'/'.join(sub)}"
    verb = {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "GET": "get" if named else "list",
        "DELETE": "delete" if named else "deletecollection",
    }[http_method]
    return Call(group, resource, verb, namespaced)


@cache
def _methods() -> dict[str, ast.FunctionDef]:
    tree = ast.parse(inspect.getsource(launcher_module))
    (cls,) = [
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == "KubernetesLauncher"
    ]
    return {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef)}


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _direct(function: ast.FunctionDef) -> tuple[set[tuple[str, str]], set[str]]:
    """(client attribute, method) pairs used, and the launcher's own methods used."""
    api_methods: set[tuple[str, str]] = set()
    own: set[str] = set()
    for node in ast.walk(function):
        if not isinstance(node, ast.Attribute):
            continue
        holder = node.value
        if isinstance(holder, ast.Attribute) and _is_self(holder.value) and holder.attr in CLIENTS:
            api_methods.add((holder.attr, node.attr))
        elif _is_self(holder) and node.attr in _methods():
            own.add(node.attr)
    return api_methods, own


def launcher_calls(*entry_points: str) -> set[Call]:
    """Every API call reachable from the given KubernetesLauncher methods."""
    seen: set[str] = set()
    todo = list(entry_points)
    pairs: set[tuple[str, str]] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        used, own = _direct(_methods()[name])
        pairs |= used
        todo += own
    return {rest_call(CLIENTS[attr], method) for attr, method in pairs}


# What each process does with the launcher: the worker runs attempts (and may serve logs), and
# deletes them all at `helm uninstall` (the chart's pre-delete hook runs as its account); the
# API only reads logs.
WORKER_ENTRY_POINTS = ("launch", "status", "cancel", "logs", "delete_all_attempts")
API_ENTRY_POINTS = ("logs",)
