#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks Kubernetes manifests against the API's schema as the official
Python client (PyPI `kubernetes`) models it: every field known to its
object's type (a misspelt or misplaced key is an error, where the API server
would drop it, or refuse it with strict validation), every value of its
field's type, and every required field present (the client's own
validation). Used by scripts/deploy-check.sh; no cluster is needed.

Usage: deploy-kube-check.py MANIFEST.yaml...
"""

import json
import re
import sys

import kubernetes.client as k8s
import yaml

SCALARS = {"str": str, "int": int, "float": (int, float), "bool": bool}


def model_name(doc):
    """`apps/v1` + `DaemonSet` -> `V1DaemonSet`, the client's class name."""
    version = doc.get("apiVersion", "").split("/")[-1]
    return version[:1].upper() + version[1:] + doc.get("kind", "")


def check(value, typ, path, errors):
    if typ == "object":  # IntOrString, Quantity, free-form: anything
        return
    if m := re.fullmatch(r"[Ll]ist\[(.+)\]", typ):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, found {type(value).__name__}")
            return
        for i, v in enumerate(value):
            check(v, m.group(1), f"{path}[{i}]", errors)
        return
    if m := re.fullmatch(r"(?:dict\(str, (.+)\)|Dict\[str, (.+)\])", typ):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map, found {type(value).__name__}")
            return
        for k, v in value.items():
            check(v, m.group(1) or m.group(2), f"{path}.{k}", errors)
        return
    if typ in SCALARS:
        ok = isinstance(value, SCALARS[typ]) and not (typ != "bool" and isinstance(value, bool))
        if not ok:
            errors.append(f"{path}: expected {typ}, found {value!r}")
        return
    if typ in ("datetime", "bytes"):
        return
    cls = getattr(k8s, typ, None)
    if cls is None:
        errors.append(f"{path}: the client knows no type {typ}")
        return
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a {typ} object, found {value!r}")
        return
    by_key = {key: attr for attr, key in cls.attribute_map.items()}
    for key, v in value.items():
        attr = by_key.get(key)
        if attr is None:
            errors.append(f"{path}.{key}: no such field in {typ}")
        else:
            check(v, cls.openapi_types[attr], f"{path}.{key}", errors)


def main(paths):
    client = k8s.ApiClient()
    failed = False
    for path in paths:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        for n, doc in enumerate(docs):
            name = model_name(doc)
            where = f"{path} document {n + 1} ({doc.get('kind', '?')})"
            errors = []
            if getattr(k8s, name, None) is None:
                errors.append(f"unknown apiVersion/kind {doc.get('apiVersion')}/{doc.get('kind')}")
            else:
                check(doc, name, "", errors)
                try:
                    # Builds the client's objects: required fields and enums checked.
                    client.deserialize(json.dumps(doc), name, "application/json")
                except (ValueError, TypeError) as e:
                    errors.append(str(e))
            for e in errors:
                print(f"error: {where}: {e}", file=sys.stderr)
            failed |= bool(errors)
            if not errors:
                print(f"{where}: valid {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
