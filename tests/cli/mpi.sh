# Sourced by the tests whose every check launches ranks: ends the test as skipped (exit 0, with a note) when mpirun is
# not installed, and defines `mpi N ARGS...`: ARGS under mpirun as N ranks of one thread each (oversubscribed: more
# ranks than cores is fine), as root too.
if ! command -v mpirun >/dev/null 2>&1; then
    echo "skip    mpirun not installed (scripts/setup.sh installs OpenMPI)"
    exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpi() { mpirun --oversubscribe -np "$1" -x OMP_NUM_THREADS "${@:2}"; }
