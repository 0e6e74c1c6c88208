# find-python.sh — sourced by the tools that run Python: find_python MODULE...
# sets py to the first interpreter that imports every MODULE: $PYTHON when set,
# else Debian's /usr/bin/python3 (python3-numpy and python3-pytest come from
# tools/install-deps.sh), else python3 on the PATH; py stays empty when none does.
find_python() {
    local imports cand
    imports="import $(IFS=,; echo "$*")"
    py=
    for cand in ${PYTHON:-} /usr/bin/python3 python3; do
        if "$cand" -c "$imports" >/dev/null 2>&1; then
            py=$cand
            return 0
        fi
    done
    return 1
}
