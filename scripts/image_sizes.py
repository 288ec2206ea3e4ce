"""Write image sizes, as `docker image inspect` reports them, to a JSON results file.

python3 scripts/image_sizes.py OUT.json IMAGE...
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def inspect(images: list[str]) -> list[dict[str, Any]]:
    raw = subprocess.run(
        ["docker", "image", "inspect", *images], capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(raw))


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, images = Path(argv[0]), argv[1:]
    server = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    rows = {}
    for name, info in zip(images, inspect(images), strict=True):
        size = int(info["Size"])
        labels = (info.get("Config") or {}).get("Labels")
        rows[name] = {
            "id": info["Id"],
            "size_bytes": size,
            "size_mib": round(size / 2**20, 1),
            "layers": len((info.get("RootFS") or {}).get("Layers", [])),
            "labels": labels or {},
        }
    result = {
        "what": "sizes of the gpujobs images (docker image inspect .Size, uncompressed)",
        "command": "scripts/docker-images.sh (also run by tests/deploy/test_compose_stack.py)",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "docker_server": server,
        "base_image": images[0],
        "images": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({name: row["size_mib"] for name, row in rows.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
