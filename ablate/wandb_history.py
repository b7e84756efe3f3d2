"""The history an offline wandb run logged, read back from its ``.wandb`` transaction log (for
``ablate.tracking.carry_over_attempts``, which logs an earlier attempt's rows again into the job's run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_BLOCK = 32768  # the .wandb file's record framing: LevelDB's log format, 32 KiB blocks, 7-byte record headers


def read_history(run_folder: str | Path) -> list[dict[str, Any]]:
    """The history rows (what ``run.log`` logged, wandb's ``_step``/``_runtime``/``_timestamp`` left
    out) of an offline run folder, read from its ``.wandb`` transaction log; a torn end (a killed
    writer) ends the read. Empty when the folder has no readable log."""
    import json
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    files = sorted(Path(run_folder).glob("run-*.wandb"))
    if not files:
        return []
    data = files[0].read_bytes()
    rows, chunk, pos = [], b"", 7  # after the file header (":W&B", magic, version)
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # a block's tail too short for a header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 or pos + 7 + length > len(data):
            break
        chunk, pos = chunk + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind not in (1, 4):  # FIRST and MIDDLE pieces of a record: keep reading
            continue
        record = pb.Record()
        try:
            record.ParseFromString(chunk)
        except Exception:  # noqa: BLE001 - a torn record: what came before stands
            break
        chunk = b""
        if record.WhichOneof("record_type") == "history":
            row = {}
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):
                    row[key] = json.loads(item.value_json)
            rows.append(row)
    return rows
