#!/usr/bin/env bash
# Creates or updates the project-local virtualenv `.venv` from tests/python/requirements.txt.
# Re-running is cheap: the installed set is keyed by a hash of requirements.txt, so pip runs only
# when the file changed or the venv is missing. Prints the venv's python path on success.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KBQ_VENV:-$root/.venv}"
requirements="$root/tests/python/requirements.txt"
stamp="$venv/.requirements.sha256"
python="${PYTHON:-python3}"

want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "venv: creating $venv" >&2
    "$python" -m venv "$venv"
fi
echo "venv: installing $requirements" >&2
"$venv/bin/python" -m pip install --quiet --upgrade pip >&2 || true
"$venv/bin/python" -m pip install --quiet -r "$requirements" >&2
echo "$want" >"$stamp"
echo "$venv/bin/python"
