#!/usr/bin/env python3
"""Fails when a public or open symbol in the given symbol-graph directories has no documentation comment.

Symbols the compiler synthesizes (Equatable's `!=`, Codable's conformances) and members inherited from other
modules' protocols are skipped: they have no source of ours to document. An enum case, a protocol requirement and
its default implementation each need their own comment.
"""
import json
import pathlib
import sys

missing = []
checked = 0
for directory in sys.argv[1:]:
    for path in sorted(pathlib.Path(directory).glob("*.symbols.json")):
        graph = json.loads(path.read_text())
        module = graph["module"]["name"]
        for symbol in graph["symbols"]:
            if symbol.get("accessLevel") not in ("public", "open"):
                continue
            precise = symbol["identifier"]["precise"]
            if "::SYNTHESIZED::" in precise or "location" not in symbol:
                continue
            uri = symbol["location"]["uri"]
            if "/Sources/" not in uri:
                continue
            checked += 1
            if not symbol.get("docComment", {}).get("lines"):
                where = uri.split("/Sources/", 1)[1]
                line = symbol["location"]["position"]["line"] + 1
                title = ".".join(symbol["pathComponents"])
                missing.append(f"Sources/{where}:{line}: {module}.{title} ({symbol['kind']['displayName']}) has no documentation comment")

for entry in sorted(set(missing)):
    print(entry)
print(f"doc coverage: {checked - len(set(missing))} of {checked} public symbols documented")
sys.exit(1 if missing else 0)
