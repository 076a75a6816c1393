"""What the common XID codes mean, from NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors),
and what to do: whose fault it usually is (the application's, or the GPU's), and the usual action."""

from __future__ import annotations

from typing import Dict, NamedTuple


class XidMeaning(NamedTuple):
    meaning: str  # the catalogue's description
    severity: str  # "warning" (the application's own fault, or a repaired error) | "critical"
    action: str


_APP = "usually the application's own fault; the GPU is fine"
XIDS: Dict[int, XidMeaning] = {
    8: XidMeaning("GPU stopped processing", "warning", _APP + ": restart the application"),
    13: XidMeaning("Graphics Engine Exception", "warning",
                   _APP + " (an illegal instruction or out-of-range access in a kernel): run it under compute-sanitizer"),
    31: XidMeaning("GPU memory page fault", "warning",
                   _APP + " (an illegal memory access by it or its framework): run it under compute-sanitizer"),
    32: XidMeaning("Invalid or corrupted push buffer stream", "warning", "restart the application; if it recurs, "
                   "check the driver and the PCIe link"),
    43: XidMeaning("GPU stopped processing", "warning",
                   _APP + " (a channel it used was stopped after its own fault): restart the application"),
    45: XidMeaning("Preemptive cleanup, due to previous errors", "warning",
                   "channels torn down after an earlier error or a killed process; look at the XID before it"),
    48: XidMeaning("Double Bit ECC Error", "critical",
                   "an uncorrectable memory error: the process using that memory is killed; drain the node if it recurs"),
    61: XidMeaning("Internal micro-controller breakpoint/warning", "warning", "reset the GPU if it recurs"),
    62: XidMeaning("Internal micro-controller halt", "critical", "reset the GPU"),
    63: XidMeaning("ECC page retirement or row remapping recording event", "warning",
                   "memory repaired by the GPU; a GPU reset applies a pending remap"),
    64: XidMeaning("ECC page retirement or row remapper recording failure", "critical",
                   "the memory repair failed: the memory is unreliable; drain the node, RMA if it recurs"),
    68: XidMeaning("NVDEC0 Exception", "warning", "a video decoder fault: restart the application"),
    69: XidMeaning("Graphics Engine class error", "warning", _APP + ": restart the application"),
    74: XidMeaning("NVLINK Error", "critical", "an NVLink fault: reset the GPUs on the link, drain if it recurs"),
    79: XidMeaning("GPU has fallen off the bus", "critical",
                   "the GPU no longer answers on PCIe: reset or reboot the node, RMA if it recurs"),
    92: XidMeaning("High single-bit ECC error rate", "warning", "corrected errors above threshold: watch the trend"),
    94: XidMeaning("Contained ECC error", "warning",
                   "an uncorrectable error contained to the application using that memory: restart it"),
    95: XidMeaning("Uncontained ECC error", "critical",
                   "an uncorrectable error not contained: every application on the GPU is affected; reset the GPU"),
    119: XidMeaning("GSP RPC timeout", "critical", "the GPU's system processor stopped answering: reset the GPU"),
    120: XidMeaning("GSP error", "critical", "the GPU's system processor failed: reset the GPU"),
}

UNKNOWN = XidMeaning("not in cgstat's table", "warning", "look the code up in NVIDIA's XID catalogue")


def meaning(code: int) -> XidMeaning:
    return XIDS.get(code, UNKNOWN)
