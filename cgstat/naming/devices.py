"""Names of block devices by MAJ:MIN, for the per-device IO rows.

Reads /sys/dev/block/MAJ:MIN (a link to the device, whose last part is its name) and,
where /sys is not available (a recorded tree), /proc/partitions.
"""

from __future__ import annotations

import os
from typing import Dict, Optional

from cgstat.kernel.hostfs import HostFS


class DeviceNames:
    def __init__(self, fs: HostFS):
        self.fs = fs
        self._names: Dict[str, Optional[str]] = {}
        self._partitions: Optional[Dict[str, str]] = None

    def name(self, device: str) -> Optional[str]:
        if device not in self._names:
            self._names[device] = self._lookup(device)
        return self._names[device]

    def _lookup(self, device: str) -> Optional[str]:
        try:
            target = os.readlink(self.fs.path("/sys/dev/block/" + device))
            return target.rstrip("/").rsplit("/", 1)[-1]
        except OSError:
            pass
        if self._partitions is None:
            self._partitions = {}
            text = self.fs.read_optional("/proc/partitions") or ""
            for line in text.splitlines()[1:]:
                parts = line.split()
                if len(parts) == 4 and parts[0].isdigit() and parts[1].isdigit():
                    self._partitions[f"{parts[0]}:{parts[1]}"] = parts[3]
        return self._partitions.get(device)
