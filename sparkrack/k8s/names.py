"""What the API server checks that the OpenAPI schemas do not: names, labels, images.

The offline schema validation (:mod:`sparkrack.k8s.validate`) knows types and required fields;
the API server also refuses an object whose name is not of its kind's form, a label that is
not a label, a container without an image, two containers or ports of one pod with one name,
and a second object of one kind with a name already taken. A StatefulSet name longer than 52
characters is accepted and then no pod of it is ever created (its ``controller-revision-hash``
label would exceed 63 characters). :func:`name_problems` checks all of that on a list of
manifests (apiserver's ``ValidateObjectMeta`` and pod validation, as of Kubernetes 1.35).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sparkrack import contract
from sparkrack.errors import Problem, shown
from sparkrack.inputs import imageref

RULE = "k8s-name"
LABEL_MAX = 63
SUBDOMAIN_MAX = 253
PORT_NAME_MAX = 15
_LABEL_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")

DNS_1123_LABEL = f"a DNS label (lower-case letters, digits, '-'; at most {LABEL_MAX})"
DNS_1035_LABEL = f"a DNS label starting with a letter (at most {LABEL_MAX})"
SUBDOMAIN = f"a DNS subdomain (lower-case letters, digits, '-', '.'; at most {SUBDOMAIN_MAX})"


def _label_ok(text: str) -> bool:
    return len(text) <= LABEL_MAX and bool(_LABEL_1123.fullmatch(text))


def _object_name(kind: str, name: str) -> str | None:
    """What is wrong with ``name`` for an object of ``kind`` (None: nothing)."""
    if kind == "Namespace" and not _label_ok(name):
        return f"is not {DNS_1123_LABEL}"
    if kind == "Service" and not (len(name) <= LABEL_MAX and _LABEL_1035.fullmatch(name)):
        return f"is not {DNS_1035_LABEL}"
    if len(name) > SUBDOMAIN_MAX or not _SUBDOMAIN.fullmatch(name):
        return f"is not {SUBDOMAIN}"
    if kind == "StatefulSet" and len(name) > contract.STATEFULSET_NAME_MAX:
        return (
            f"is {len(name)} characters: a StatefulSet of more than "
            f"{contract.STATEFULSET_NAME_MAX} never gets a pod (its controller-revision-hash "
            "label would pass 63 characters)"
        )
    if kind == "Job" and len(name) > LABEL_MAX:
        return f"is {len(name)} characters: a Job's name is its pods' job-name label (at most 63)"
    return None


def _label_problems(labels: Any) -> Iterator[str]:
    if not isinstance(labels, Mapping):
        return
    for key, value in labels.items():
        prefix, _, name = str(key).rpartition("/")
        if prefix and (len(prefix) > SUBDOMAIN_MAX or not _SUBDOMAIN.fullmatch(prefix)):
            yield f"label key {shown(key)} has a prefix that is not {SUBDOMAIN}"
        elif len(name) > LABEL_MAX or not _LABEL_NAME.fullmatch(name):
            yield f"label key {shown(key)} is not a label name"
        if (
            not isinstance(value, str)
            or len(value) > LABEL_MAX
            or not _LABEL_VALUE.fullmatch(value)
        ):
            yield f"label {key}={shown(value)} is not a label value (at most 63, alphanumeric ends)"


def _pod_specs(doc: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    spec = doc.get("spec") or {}
    if doc.get("kind") == "Pod":
        yield spec
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if isinstance(template, Mapping):
        yield from _pod_specs({"kind": "Pod", **template})
    job = spec.get("jobTemplate") if isinstance(spec, Mapping) else None
    if isinstance(job, Mapping):
        yield from _pod_specs({"kind": "Job", **job})


def _pod_problems(pod: Mapping[str, Any]) -> Iterator[str]:
    yield from _label_problems((pod.get("metadata") or {}).get("labels"))
    names: set[str] = set()
    ports: set[str] = set()
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
    for c in containers:
        name = str(c.get("name", ""))
        if not _label_ok(name):
            yield f"container name {shown(name)} is not {DNS_1123_LABEL}"
        if name in names:
            yield f"two containers are named {name}"
        names.add(name)
        wrong = imageref.problem(c.get("image", ""))
        if wrong:
            yield f"container {name}'s image {shown(c.get('image', ''))} {wrong}"
        for port in c.get("ports") or []:
            yield from _port_problems(port, ports, f"container {name}")
        for env in c.get("env") or []:
            env_name = str(env.get("name", ""))
            if not _ENV_NAME.fullmatch(env_name):
                yield f"container {name}'s env name {shown(env_name)} is not an identifier"
    for volume in pod.get("volumes") or []:
        if not _label_ok(str(volume.get("name", ""))):
            yield f"volume name {shown(volume.get('name'))} is not {DNS_1123_LABEL}"


def _port_problems(port: Mapping[str, Any], seen: set[str], owner: str) -> Iterator[str]:
    number = port.get("containerPort", port.get("port"))
    if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
        yield f"{owner}'s port {shown(number)} is not 1-65535"
    name = port.get("name")
    if name is None:
        return
    text = str(name)
    if (
        len(text) > PORT_NAME_MAX
        or not _PORT_NAME.fullmatch(text)
        or "--" in text
        or not re.search("[a-z]", text)
    ):
        yield f"{owner}'s port name {shown(text)} is not an IANA service name (at most 15)"
    if text in seen:
        yield f"{owner} has two ports named {text}"
    seen.add(text)


def _fix_of(what: str, kind: str) -> str:
    if "image" in what:
        return (
            "name a valid image: the profile's image, or serving_fetch_image for the fetch and "
            "pre-pull Jobs"
        )
    return f"fix the renderer of {kind}"


def name_problems(docs: Iterable[Mapping[str, Any]], source: str) -> list[Problem]:
    """Every name, label, image and port the API server would refuse, and every name taken
    twice by one kind in one namespace (a Service: in any); a problem names the deployment whose
    name made it."""
    problems: list[Problem] = []
    taken: dict[tuple[str, str, str], str] = {}
    for doc in docs:
        kind = str(doc.get("kind", "?"))
        meta = doc.get("metadata") or {}
        name = str(meta.get("name", ""))
        owner = str((meta.get("labels") or {}).get(contract.LABEL_DEPLOYMENT) or "")
        where = f"{kind}/{name}"
        rename = (
            f"shorten or rename deployment {owner} (its name in serving_deployments)"
            if owner
            else f"fix the renderer of {kind}"
        )
        found = [(f"name {wrong}", rename) for wrong in [_object_name(kind, name)] if wrong]
        found += [(what, rename) for what in _label_problems(meta.get("labels"))]
        for pod in _pod_specs(doc):
            found += [(what, _fix_of(what, kind)) for what in _pod_problems(pod)]
        if kind == "Service":
            seen: set[str] = set()
            for port in (doc.get("spec") or {}).get("ports") or []:
                found += [(w, _fix_of(w, kind)) for w in _port_problems(port, seen, "the Service")]
        problems += [Problem(source, where, what, fix, RULE) for what, fix in found]
        # Services share one set of names across the serving and the agents' namespaces: a
        # deployment's Service named like the gateway's would answer at its name, the gateway
        # bypassed, for a client that names the other namespace.
        slot = (kind, "" if kind == "Service" else str(meta.get("namespace", "")), name)
        component = str((meta.get("labels") or {}).get(contract.LABEL_COMPONENT) or "sparkrack")
        this = f"deployment {owner}" if owner else f"the {component}"
        if slot in taken:
            problems.append(
                Problem(
                    source,
                    where,
                    f"is rendered twice ({taken[slot]} and {this}): the second would replace "
                    "the first",
                    "rename one deployment so no object name repeats (sparkrack-<name>-api, "
                    "-r<rank>, -fetch, ... and sparkrack-openai, the gateway's)",
                    RULE,
                )
            )
        else:
            taken[slot] = this
    return problems
