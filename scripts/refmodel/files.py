"""Files are written to a temporary name and renamed, so a reader never sees half of one."""
import json
import os
from pathlib import Path


def write_text(path, text):
    tmp = Path(f"{path}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path, obj):
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
