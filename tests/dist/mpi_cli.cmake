# ctest cli_mpi: eval, sensitivity, boost-sweep and vq train under `mpirun -np 2` and `-np 3`
# (uneven blocks, units split inside a (layer, KV head)) give the bytes of one process; ranks
# past the unit count idle; a rank that cannot see the dump, reads another dump or meets a bad
# slice ends the job non-zero naming its rank and host, and no output file is left.
# Run as cmake -DKVLAB=<kvlab> -DMPIEXEC=<mpirun> -DHAVE_MPI=ON|OFF -DPYTHON=<python3> -DDIR=<dir> -P mpi_cli.cmake
if(NOT HAVE_MPI OR NOT EXISTS "${MPIEXEC}")
  message("mpi_cli: skipped: kvlab built without MPI or mpirun not found ('${MPIEXEC}')")
  return()
endif()
# CI runs as root; OpenMPI refuses root unless told.
set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
set(d ${DIR}/mpi_cli)
file(REMOVE_RECURSE ${d})
file(MAKE_DIRECTORY ${d})

function(run_ok)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN} failed (${rc}): ${err}")
  endif()
endfunction()
# mpirun ARGS: must exit non-zero with `needle` in its messages and leave no file `absent`.
function(mpi_fails needle absent)
  execute_process(COMMAND ${MPIEXEC} --oversubscribe ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "${needle}")
    message(FATAL_ERROR "mpirun ${ARGN}: expected a failure naming '${needle}', got rc ${rc}: ${out}${err}")
  endif()
  file(GLOB left ${absent}*)
  if(left)
    message(FATAL_ERROR "mpirun ${ARGN}: left ${left} behind")
  endif()
endfunction()
# Two files with the same bytes; JSON minus the lines that describe the run, not the result.
function(same a b)
  file(READ ${a} x)
  file(READ ${b} y)
  if(a MATCHES "\\.json$")
    string(REGEX REPLACE "\n  \"(threads|ranks|timing_s)\": [^\n]*" "" x "${x}")
    string(REGEX REPLACE "\n  \"(threads|ranks|timing_s)\": [^\n]*" "" y "${y}")
  endif()
  if(NOT x STREQUAL y)
    message(FATAL_ERROR "${b} differs from the one-process ${a}")
  endif()
endfunction()

set(t ${d}/tiny.h5)
run_ok(${KVLAB} synth --preset tiny --tokens 320 --quiet --out ${t})
set(sens sensitivity ${t} --group 64 --sink 16 --queries last:48 --quiet)
set(sweep boost-sweep ${t} --method kitty:group=64,sink=16 --rates 0,0.125,0.5 --seeds 2 --quiet)
set(vq vq train ${t} --spec CQ-4c4b --iters 4)
# 2 layers x 2 KV heads x 7 methods = 28 eval units; 4 for sensitivity and boost-sweep; 8 for vq.
run_ok(${KVLAB} eval ${t} --queries last:48 --format json --quiet --out ${d}/e1.json)
run_ok(${KVLAB} ${sens} --out ${d}/s1.csv)
run_ok(${KVLAB} ${sweep} --out ${d}/b1.csv)
run_ok(${KVLAB} ${vq} --out ${d}/v1.h5)
foreach(n 2 3)
  set(m ${MPIEXEC} --oversubscribe -np ${n} ${KVLAB})
  run_ok(${m} eval ${t} --queries last:48 --format json --quiet --threads 1 --out ${d}/e${n}.json)
  file(READ ${d}/e${n}.json j)
  if(NOT j MATCHES "\"ranks\": ${n},")  # the ranks shared the work, not ran it each
    message(FATAL_ERROR "eval under mpirun -np ${n} did not run on ${n} ranks:\n${j}")
  endif()
  same(${d}/e1.json ${d}/e${n}.json)
  run_ok(${m} ${sens} --threads 1 --out ${d}/s${n}.csv)
  foreach(f .csv _ranking.csv _heatmap.svg)
    same(${d}/s1${f} ${d}/s${n}${f})
  endforeach()
  run_ok(${m} ${sweep} --threads 1 --out ${d}/b${n}.csv)
  foreach(f .csv _summary.csv _score_mse.svg _output_err.svg)
    same(${d}/b1${f} ${d}/b${n}${f})
  endforeach()
  run_ok(${m} ${vq} --threads 1 --out ${d}/v${n}.h5)
  same(${d}/v1.h5 ${d}/v${n}.h5)
endforeach()

# 2 units (one layer, two KV heads, one method) on 3 ranks: rank 2 idles, the result is the same.
run_ok(${KVLAB} eval ${t} --layers 1 --methods kivi-2 --queries last:48 --format json --quiet --out ${d}/i1.json)
run_ok(${MPIEXEC} --oversubscribe -np 3 ${KVLAB} eval ${t} --layers 1 --methods kivi-2 --queries last:48
       --format json --quiet --out ${d}/i3.json)
same(${d}/i1.json ${d}/i3.json)

# Failures (MPMD: rank 1 gets other arguments). A dump rank 1 cannot see:
mpi_fails("rank 1 of 2 on [^:]+: '${d}/absent.h5': no such file" ${d}/f.json
          -np 1 ${KVLAB} eval ${t} --quiet --format json --out ${d}/f.json :
          -np 1 ${KVLAB} eval ${d}/absent.h5 --quiet --format json --out ${d}/f.json)
# Rank 1 reads another dump (a stale copy on its node): rank 0 refuses it, naming rank 1 and host.
set(short ${d}/short.h5)
run_ok(${KVLAB} synth --preset tiny --tokens 256 --quiet --out ${short})
mpi_fails("rank 1 on [^ ]+ read the dump as \\(layers 2, q heads 4, kv heads 2, head_dim 16, tokens 256" ${d}/f.h5
          -np 1 ${KVLAB} ${vq} --out ${d}/f.h5 : -np 1 ${KVLAB} vq train ${short} --spec CQ-4c4b --iters 4
          --out ${d}/f.h5)
# A bad slice inside rank 1's units (a NaN in layer 1, the second half of the units): the job
# stops while rank 0 waits for the results.
execute_process(COMMAND ${PYTHON} -c "import h5py" RESULT_VARIABLE no_h5py OUTPUT_QUIET ERROR_QUIET)
if(no_h5py)
  message("mpi_cli: bad-slice case skipped: ${PYTHON} has no h5py")
  return()
endif()
file(COPY_FILE ${t} ${d}/nan.h5)
run_ok(${PYTHON} -c "import h5py, numpy as np
f = h5py.File('${d}/nan.h5', 'r+')
x = f['layers/1/q'][()]
x[1, 5, 3] = np.nan
f['layers/1/q'][...] = x")  # lines, not semicolons: CMake splits arguments at those
mpi_fails("rank 1 of 2 on [^:]+: ${d}/nan.h5: /layers/1/q head 1 .* non-finite" ${d}/f.json
          -np 1 ${KVLAB} eval ${t} --quiet --format json --out ${d}/f.json :
          -np 1 ${KVLAB} eval ${d}/nan.h5 --quiet --format json --out ${d}/f.json)
