"""Writes openapi.json, the API contract as JSON, from openapi.yaml (both at the repository root).

The server embeds both files and serves them as they are (GET /openapi.yaml, GET /openapi.json),
and the Swift tests read the JSON, so openapi.json must always be exactly what this script makes
from openapi.yaml: `make test` runs it with --check, which fails on any difference.

    .build/venv/bin/python scripts/openapi-json.py          # rewrites openapi.json
    .build/venv/bin/python scripts/openapi-json.py --check  # exit 1, with a diff, if it is stale

Output: keys in the YAML's order, two-space indentation, UTF-8 (no \\u escapes beyond JSON's),
a final newline — the same bytes on every run. Stricter than PyYAML alone, so that every YAML
reader sees the JSON value this file holds: a duplicate key (also `200` and `'200'`, one JSON key)
is an error, and so is a plain scalar that YAML 1.1 (PyYAML) and YAML 1.2 read differently or that
JSON cannot hold (`yes`, `on`, `010`, `1e3`, `0x1F`, `1_000`, `.inf`, `2024-01-01`, …): quote it.
Needs PyYAML (pinned in scripts/requirements.txt; .build/venv has it).
"""

import difflib
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "openapi.yaml"
TARGET = ROOT / "openapi.json"
REGENERATE = ".build/venv/bin/python scripts/openapi-json.py"  # or any python3 with PyYAML

STR = "tag:yaml.org,2002:str"
# Plain scalars that PyYAML resolves to something other than a string are accepted only in the
# spellings on which YAML 1.1 and the YAML 1.2 core schema agree, with a value JSON can hold.
AGREED = {
    "tag:yaml.org,2002:null": re.compile(r"~|null|Null|NULL|"),
    "tag:yaml.org,2002:bool": re.compile(r"true|True|TRUE|false|False|FALSE"),
    "tag:yaml.org,2002:int": re.compile(r"-?(0|[1-9][0-9]*)"),
    "tag:yaml.org,2002:float": re.compile(r"-?(0|[1-9][0-9]*)\.[0-9]+"),
}
# What the YAML 1.2 core schema reads as other than a string (PyYAML reads these as strings).
CORE_NOT_STRING = re.compile(
    r"~|null|Null|NULL|true|True|TRUE|false|False|FALSE|[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+"
    r"|[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)"
)


def fail(node, message):
    mark = node.start_mark
    sys.exit(f"{SOURCE.name}:{mark.line + 1}:{mark.column + 1}: {message}")


def json_key(node):
    """The JSON key a mapping key becomes: 200 and '200' are the same key, and so are ~ and null."""
    if node.style is not None or node.tag == STR:
        return node.value
    value = yaml.SafeLoader.yaml_constructors[node.tag](yaml.SafeLoader(""), node)
    return next(iter(json.loads(json.dumps({value: 0}))))


def check(node, depth=0):
    """Rejects what PyYAML would read silently but another YAML reader might read otherwise."""
    if depth > 64:
        fail(node, "nested deeper than 64 collections")
    if isinstance(node, yaml.ScalarNode):
        if node.style is not None:  # quoted or block: always a string
            return
        if node.tag == STR:
            if CORE_NOT_STRING.fullmatch(node.value):
                fail(node, f"plain {node.value!r} is a string in YAML 1.1 but not in YAML 1.2: quote it")
        elif node.tag not in AGREED or not AGREED[node.tag].fullmatch(node.value):
            fail(node, f"plain {node.value!r} reads differently in YAML 1.1 and 1.2, or not as JSON: quote it")
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            check(item, depth + 1)
    elif isinstance(node, yaml.MappingNode):
        seen = set()
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                fail(key, "a mapping key must be a scalar (and not <<)")
            check(key, depth + 1)
            name = json_key(key)
            if name in seen:
                fail(key, f"duplicate key {name!r}")
            seen.add(name)
            check(value, depth + 1)


def generate(text):
    """The JSON text of the YAML document `text`."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            sys.exit(f"{SOURCE.name}: no document")
        check(node)
        document = loader.construct_document(node)
    finally:
        loader.dispose()
    # Mapping keys become strings the way JSON writes them (200 -> "200", true -> "true").
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def main():
    wanted = generate(SOURCE.read_text(encoding="utf-8"))
    if sys.argv[1:] == ["--check"]:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current == wanted:
            print(f"{TARGET.name} is what scripts/openapi-json.py makes from {SOURCE.name}")
            return
        diff = list(difflib.unified_diff(current.splitlines(), wanted.splitlines(),
                                         f"{TARGET.name} (committed)", f"{TARGET.name} (from {SOURCE.name})",
                                         n=2, lineterm=""))
        print("\n".join(diff[:60]) + (f"\n… {len(diff) - 60} more diff lines" if len(diff) > 60 else ""),
              file=sys.stderr)
        sys.exit(f"FAIL: {TARGET.name} is stale: it is not what {SOURCE.name} converts to.\n"
                 f"Regenerate it and commit both files: {REGENERATE}")
    if sys.argv[1:]:
        sys.exit("usage: openapi-json.py [--check]")
    if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != wanted:
        TARGET.write_text(wanted, encoding="utf-8")
        print(f"wrote {TARGET.name}")
    else:
        print(f"{TARGET.name} is up to date")


if __name__ == "__main__":
    main()
