"""The labels of the Prometheus exposition: escaped, joined and kept from tick to tick.

A series is `name{labels} value timestamp`; this module makes the `{labels} ` part.
Names follow cAdvisor (`id` = cgroup path, `name`, `image`, the kubelet's `namespace`,
`pod`, `container`; the container's labels as `container_label_<key>`). Names are hostile
(docs/security.md): values are escaped as the format requires (backslash, double quote,
newline), other control and bidi characters are written as the text `\\xNN`/`\\uXXXX`;
a container's labels are bounded in number and length, so a user's label set cannot blow
up the series. A workload's labels are rendered once and kept (LabelCache) while its
record names it the same way.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Set, Tuple, cast

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import CgroupRecord, Container, ContainerSlurm, IoDevice, Pod


MAX_CONTAINER_LABELS = 32  # container_label_* per container; the rest are left out
MAX_LABEL_NAME = 128  # characters of a sanitised label key
MAX_LABEL_VALUE = 1024  # characters of a label value (a path, an image, a label)

# --------------------------------------------------------------------------- escaping

_UNSAFE = re.compile(
    '[\\\\"\n\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e'
    '\u2066-\u2069\ud800-\udfff]')


def _escape_one(m) -> str:
    c = m.group(0)
    if c == "\\":
        return "\\\\"
    if c == '"':
        return '\\"'
    if c == "\n":
        return "\\n"
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:  # an undecoded byte, as cgstat.text writes it
        return "\\\\x%02x" % (code - 0xDC00)
    if code <= 0xFF:
        return "\\\\x%02x" % code
    return "\\\\u%04x" % code


def escape_value(value: Any) -> str:
    """A label value as the exposition writes it between double quotes."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > MAX_LABEL_VALUE:
        text = text[:MAX_LABEL_VALUE]
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape_one, text)


_LABEL_NAME_BAD = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label_name(key: str) -> str:
    """cAdvisor's rule: every character outside [a-zA-Z0-9_] becomes '_'."""
    return _LABEL_NAME_BAD.sub("_", key[:MAX_LABEL_NAME])



BLKIO_OPS = (("Read", "read_bytes_total"), ("Write", "write_bytes_total"), ("Discard", "discard_bytes_total"))

# What a record without a container or pod object reads (never changed)
_NO_CONTAINER = cast("Container", {})
_NO_POD = cast("Pod", {})
_NO_SLURM = cast("ContainerSlurm", {})


# --------------------------------------------------------------------------- labels

def render_pairs(pairs: Iterable[Tuple[str, Any]]) -> str:
    """'a="x",b="y"' for the pairs whose value is neither None nor empty."""
    out = []
    for key, value in pairs:
        if value is None or value == "":
            continue
        out.append('%s="%s"' % (key, escape_value(value)))
    return ",".join(out)


def base_labels(record: CgroupRecord) -> str:
    """id, name, image, namespace, pod, container, slurm_job, container_label_* of a cgroup record.

    As the kubelet's cAdvisor: `container` is the Kubernetes container name (empty for a
    pod-level cgroup and outside Kubernetes), `name` the runtime's name (else its ID).
    `slurm_job` is the Slurm job ID, the same on the job's, its steps' and its tasks' series
    (a label per job, not per step: a job's series stay one set however many steps it runs).
    Empty values are left out, which PromQL reads the same as `label=""`.
    """
    container = record.get("container") or _NO_CONTAINER
    pod = record.get("pod") or container.get("pod") or _NO_POD
    name = container.get("name") or container.get("id")
    pairs: List[Tuple[str, Any]] = [
        ("id", record.get("cgroup")),
        ("name", name),
        ("image", container.get("image")),
        ("namespace", pod.get("namespace")),
        ("pod", pod.get("name")),
        ("container", container.get("name") if pod and container else None),
        ("slurm_job", (container.get("slurm") or _NO_SLURM).get("job_id")),
    ]
    labels = container.get("labels")
    if isinstance(labels, dict) and labels:
        seen: Set[str] = set()
        for key in sorted(labels)[:MAX_CONTAINER_LABELS * 2]:
            if len(seen) >= MAX_CONTAINER_LABELS:
                break
            value = labels[key]
            if not isinstance(key, str) or not isinstance(value, str):
                continue
            label = "container_label_" + sanitize_label_name(key)
            if label in seen:
                continue  # two keys sanitised alike: the first (sorted) wins
            seen.add(label)
            pairs.append((label, value))
    return render_pairs(pairs)


def join_labels(base: str, extra: str) -> str:
    if not extra:
        return base
    if not base:
        return extra
    return base + "," + extra


def label_brace(base: str, extra: str = "") -> bytes:
    """b'{labels} ', what stands between a sample's name and its value (b' ' for none)."""
    labels = join_labels(base, extra)
    return ("{" + labels + "} " if labels else " ").encode("utf-8", "backslashreplace")


def _text_or_none(*values: Any) -> bool:
    """Whether equal values of these are sure to render the same (1 == 1.0 == True)."""
    return all(v is None or isinstance(v, str) for v in values)


class WorkloadLabels:
    """The labels of one workload's series, rendered (escaped, joined, encoded) once.

    `identity` is a copy of what they were rendered from (the record's type, unit,
    container and pod; its cgroup path is the key it is kept under): a record whose own
    compares equal gets these labels again. Only workloads whose named values are text (or
    null) are kept: 1, 1.0 and True compare equal but are written differently.
    """

    __slots__ = ("identity", "base", "brace", "cpu_total", "info", "devices", "interfaces", "extra")

    def __init__(self, record: CgroupRecord, identity: Tuple[Any, ...]):
        container = record.get("container") or _NO_CONTAINER
        pod = record.get("pod") or container.get("pod") or _NO_POD
        keep = _text_or_none(record.get("type"), record.get("unit"), container.get("runtime"),
                             container.get("id"), container.get("name"), container.get("image"),
                             pod.get("namespace"), pod.get("name"), pod.get("qos"))
        self.identity = copy.deepcopy(identity) if keep else None
        self.base = base_labels(record)
        self.brace = label_brace(self.base)
        self.cpu_total = label_brace(self.base, 'cpu="total"')
        self.info = label_brace(self.base, render_pairs((
            ("type", record.get("type")), ("runtime", container.get("runtime")),
            ("container_id", container.get("id")), ("unit", record.get("unit")), ("qos", pod.get("qos")),
            ("sandbox", "true" if container.get("sandbox") else None))))
        # the braces of its block devices and network interfaces, by what they are rendered
        # from; each render keeps only those its record has
        self.devices: Dict[Any, Tuple[bytes, ...]] = {}
        self.interfaces: Dict[str, bytes] = {}
        self.extra: Dict[str, bytes] = {}  # braces with one more constant label (event="high")

    def with_label(self, extra: str) -> bytes:
        brace = self.extra.get(extra)
        if brace is None:
            brace = self.extra[extra] = label_brace(self.base, extra)
        return brace


class LabelCache:
    """The rendered labels of the workloads of the last tick, for the next one.

    A series is `name{labels} value timestamp`, and a workload's labels (cgroup path,
    container name, image, labels ...) are the same tick after tick: escaping and joining
    them again was a quarter of a render. One per exporter, passed to each `render`: a
    render keeps only the workloads of its own records, so the cache holds one tick's
    worth whatever the churn (~3.7 KiB a workload, 3.6 MiB at 1,000 containers; a
    render's peak is ~10 MiB lower than it was without). Kept workloads are never changed
    but for their device and interface braces, which are the same whoever makes them: a
    render in the HTTP server's thread (OpenMetrics) may use the cache while the next
    tick renders.
    """

    __slots__ = ("workloads",)

    def __init__(self) -> None:
        self.workloads: Dict[str, WorkloadLabels] = {}


def workload_labels(record: CgroupRecord, last: Dict[str, WorkloadLabels],
                    kept: Dict[str, WorkloadLabels]) -> WorkloadLabels:
    """The record's workload from the last tick if it is the same, else a new one."""
    key = record.get("cgroup")
    identity = (record.get("type"), record.get("unit"), record.get("container"), record.get("pod"))
    if not isinstance(key, str):
        return WorkloadLabels(record, identity)
    workload = last.get(key)
    if workload is None or workload.identity is None or workload.identity != identity:
        workload = WorkloadLabels(record, identity)
    if workload.identity is not None:
        kept[key] = workload
    return workload


def device_braces(base: str, dev: IoDevice, known: Dict[Any, Tuple[bytes, ...]],
                   seen: Dict[Any, Tuple[bytes, ...]]) -> Tuple[bytes, ...]:
    """A block device's braces: for its IO counters, then blkio Read, Write, Discard.

    `known`: those of the workload's devices last tick, by MAJ:MIN and name; `seen` gets
    this one's."""
    key = (dev.get("device"), dev.get("name"))
    if not _text_or_none(*key):
        return _new_device_braces(base, dev)
    braces = known.get(key) or _new_device_braces(base, dev)
    seen[key] = braces
    return braces


def _new_device_braces(base: str, dev: IoDevice) -> Tuple[bytes, ...]:
    majmin = str(dev.get("device") or "")
    major, _, minor = majmin.partition(":")
    dname = dev.get("name")
    device = "/dev/" + dname if dname else majmin
    dlabel = 'device="%s"' % escape_value(device)
    blk = '%s,major="%s",minor="%s",operation=' % (dlabel, escape_value(major), escape_value(minor))
    return (label_brace(base, dlabel),) + tuple(label_brace(base, blk + '"' + op + '"') for op, _ in BLKIO_OPS)
