# Sourced by the scripts that run on a lent GPU: perfaudit's dependencies that the device image lacks, from the
# wheels in .whl/ (carried with the call), and the rules package in a checkout that is not installed.
if ! python3 -c "import ijson, msgspec, isal, jsonschema, libcst" 2>/dev/null && [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
python3 -c "import perfaudit.rules" 2>/dev/null || ln -s ../rules perfaudit/rules
