# ctest cli_safety: hostile options never crash kvlab, strict parsers name what is wrong, and no
# command writes over its input (same path, another spelling, a symlink or a hard link).
# Run as cmake -DKVLAB=<kvlab> -DPYTHON=<python3 with numpy> -DDIR=<scratch dir> -P safety_cli.cmake
set(d ${DIR}/safety_cli)
file(REMOVE_RECURSE ${d})
file(MAKE_DIRECTORY ${d}/adir)

function(kvlab_ok)
  execute_process(COMMAND ${KVLAB} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvlab ${ARGN} failed (${rc}): ${err}")
  endif()
endfunction()
# Fails with exit status 1..127 (an error, not a signal) and a message matching `needle`.
function(kvlab_fails needle)
  execute_process(COMMAND ${KVLAB} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 120)
  if(NOT rc MATCHES "^[0-9]+$" OR rc EQUAL 0 OR rc GREATER 127 OR NOT err MATCHES "${needle}")
    message(FATAL_ERROR "kvlab ${ARGN}: expected an error naming '${needle}', got rc '${rc}': ${err}${out}")
  endif()
endfunction()
# Exits 0 or with an error, never by a signal or a timeout, and prints no nan.
function(kvlab_survives)
  execute_process(COMMAND ${KVLAB} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 120)
  if(NOT rc MATCHES "^[0-9]+$" OR rc GREATER 127 OR out MATCHES "nan")
    message(FATAL_ERROR "kvlab ${ARGN}: ended with '${rc}' (a signal or timeout) or printed nan: ${err}${out}")
  endif()
endfunction()

set(t ${d}/t.h5)
kvlab_ok(synth --preset tiny --tokens 128 --quiet --out ${t})
kvlab_ok(vq train ${t} --spec CQ-4c4b --iters 2 --out ${d}/cb.h5)
execute_process(COMMAND ${PYTHON} -c "import numpy as np; r = np.random.default_rng(0); \
np.save('${d}/x.npy', r.standard_normal((64, 8)).astype(np.float32)); \
np.save('${d}/w.npy', np.ones(64, np.float32))" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "numpy could not write the inputs")
endif()

# --- 1. Every numeric option with hostile values: an error or a run, never a signal. ---
set(big 4611686018427387904)  # 2^62
set(probes
    "eval|${t}|--methods|kivi-2|--quiet|--layers|0|--threads"
    "eval|${t}|--methods|kivi-2|--quiet|--layers|0|--query-tile"
    "eval|${t}|--methods|kivi-2|--quiet|--layers|0|--key-tile"
    "sensitivity|${t}|--quiet|--layers|0|--out|${d}/s.csv|--bits"
    "sensitivity|${t}|--quiet|--layers|0|--out|${d}/s.csv|--group"
    "sensitivity|${t}|--quiet|--layers|0|--out|${d}/s.csv|--sink"
    "boost-sweep|${t}|--quiet|--layers|0|--rates|0,0.25|--out|${d}/b.csv|--seeds"
    "boost-sweep|${t}|--quiet|--layers|0|--rates|0,0.25|--out|${d}/b.csv|--calib-tokens"
    "boost-sweep|${t}|--quiet|--layers|0|--rates|0,0.25|--out|${d}/b.csv|--calib-queries"
    "kmeans|--input|${d}/x.npy|--out|${d}/k.npz|--k"
    "kmeans|--input|${d}/x.npy|--k|4|--out|${d}/k.npz|--iters"
    "kmeans|--input|${d}/x.npy|--k|4|--out|${d}/k.npz|--restarts"
    "kmeans|--input|${d}/x.npy|--k|4|--out|${d}/k.npz|--max-points-per-centroid"
    "kmeans|--input|${d}/x.npy|--k|4|--out|${d}/k.npz|--threads"
    "synth|--preset|tiny|--quiet|--out|${d}/y.h5|--tokens"
    "synth|--preset|tiny|--quiet|--out|${d}/y.h5|--layers"
    "synth|--preset|tiny|--quiet|--out|${d}/y.h5|--q-heads"
    "synth|--preset|tiny|--quiet|--out|${d}/y.h5|--kv-heads"
    "synth|--preset|tiny|--quiet|--out|${d}/y.h5|--head-dim"
    "synth|--preset|tiny|--quiet|--out|${d}/y.h5|--rope-theta"
    "synth|--preset|tiny|--quiet|--out|${d}/y.h5|--sink-tokens"
    "info|${t}|--outlier-factor"
    "info|${t}|--top"
    "demo|--methods|kivi-2|--heads"
    "demo|--methods|kivi-2|--tokens"
    "demo|--methods|kivi-2|--head-dim"
    "methods|--tokens"
    "methods|--head-dim"
    "vq|train|${t}|--spec|CQ-4c4b|--out|${d}/c2.h5|--iters"
    "vq|train|${t}|--spec|CQ-4c4b|--out|${d}/c2.h5|--threads"
    "vq|reorder|${d}/cb.h5|--dump|${t}|--smem-bytes|64|--out|${d}/c3.h5|--reg-bytes"
    "vq|reorder|${d}/cb.h5|--dump|${t}|--reg-bytes|64|--out|${d}/c3.h5|--smem-bytes")
foreach(p IN LISTS probes)
  string(REPLACE "|" ";" args "${p}")
  foreach(v 0 -1 nan inf ${big} 9223372036854775808 1e3 2abc)
    kvlab_survives(${args} ${v})
  endforeach()
endforeach()

# The findings of issue 17, each by its message.
kvlab_fails("--threads: 100000 is outside 0 \\(the OpenMP default\\) to" eval ${t} --threads 100000)
kvlab_fails("--threads: 100000 is outside" vq train ${t} --spec CQ-4c4b --threads 100000 --out ${d}/c2.h5)
kvlab_fails("--threads: -1 is outside" kmeans --input ${d}/x.npy --k 4 --threads -1 --out ${d}/k.npz)
# OMP_NUM_THREADS is bounded as --threads is; values libgomp rejects itself (negative, zero,
# text) leave its default in place.
set(kvlab_bin ${KVLAB})
set(KVLAB ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=100000 ${kvlab_bin})
kvlab_fails("OMP_NUM_THREADS: 100000 threads is more than" eval ${t} --methods kivi-2 --quiet --layers 0)
kvlab_fails("OMP_NUM_THREADS: 100000 threads is more than" eval ${t} --methods kivi-2 --quiet --layers 0 --threads 2)
foreach(v -4 0 abc)
  set(KVLAB ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=${v} ${kvlab_bin})
  kvlab_ok(eval ${t} --methods kivi-2 --quiet --layers 0)
endforeach()
set(KVLAB ${kvlab_bin})
kvlab_fails("--head-dim: 0 is outside 1 to" methods --head-dim 0)
kvlab_fails("--tokens: 0 is outside 1 to" methods --tokens 0)
kvlab_fails("--tokens x --head-dim x 16 bits: ${big} x 128 x 16 overflows" methods --tokens ${big})
kvlab_fails("layers x q heads x tokens x head_dim x 2 bytes: .* overflows" synth --preset tiny --tokens ${big} --out ${d}/y.h5)
kvlab_fails("one layer's q needs [0-9]+ MiB of memory; this machine has" synth --preset tiny --tokens 100000000000 --out ${d}/y.h5)
kvlab_fails("--heads x --tokens x --head-dim: .* overflows" demo --heads ${big})
kvlab_fails("demo's synthetic K/V needs [0-9]+ MiB of memory" demo --tokens 100000000000)
kvlab_fails("--outlier-factor: 'inf' is not a finite number" info ${t} --outlier-factor inf)
kvlab_fails("--sink-tokens: -1 is outside 0 to" synth --preset tiny --sink-tokens -1 --out ${d}/y.h5)
kvlab_fails("--group: 0 is outside 1 to" sensitivity ${t} --group 0 --out ${d}/s.csv)
kvlab_fails("--top-p: -0.5 is outside \\(0, 1\\]" dump --llama2c ${d}/x.npy --tokenizer ${d}/x.npy --prompt a --top-p -0.5)
kvlab_fails("--temperature: 'nan' is not a finite number" dump --llama2c ${d}/x.npy --tokenizer ${d}/x.npy --prompt a --temperature nan)
kvlab_fails("--seed: 0 is outside 1 to" dump --llama2c ${d}/x.npy --tokenizer ${d}/x.npy --prompt a --seed 0)
kvlab_ok(eval ${t} --methods kivi-2 --quiet --key-tile ${big} --query-tile ${big})  # tiles cap at T
kvlab_ok(kmeans --input ${d}/x.npy --k 4 --max-points-per-centroid ${big} --out ${d}/k.npz)

# --- 2. Strict parsers: one --layers parser, spec keys, directories, sampling ranges. ---
kvlab_fails("--layers '1,2': '1,2' is not a non-negative integer" info ${t} --layers 1,2)
kvlab_fails("--layers '2abc'" info ${t} --layers 2abc)
kvlab_fails("--layers '-1': layers are numbered from 0" info ${t} --layers -1)
kvlab_fails("--layers '0-1x'" eval ${t} --layers 0-1x)
kvlab_fails("out of range; the dump has 2 layers \\(0-1\\)" eval ${t} --layers 0-9)
kvlab_fails("group=-1 must be >= 1 \\(or 'all'" quantize --input ${d}/x.npy --quantizer bits=2,group=-1 --out ${d}/q.npz)
kvlab_fails("key 'bits' is given twice" quantize --input ${d}/x.npy --quantizer bits=2,bits=4 --out ${d}/q.npz)
kvlab_fails("key 'kbits' is given twice" eval ${t} --methods kivi:kbits=2,kbits=4)
kvlab_fails("vgroup=-1 must be >= 1" eval ${t} --methods kivi:vgroup=-1)
kvlab_fails("key 'tokens' is given twice" eval synthetic:tiny:tokens=64,tokens=128)
kvlab_fails("tokens='-5' is negative" eval synthetic:tiny:tokens=-5)
kvlab_fails("vq spec vector size='99999999999' is not an integer" vq train ${t} --spec CQ-99999999999c8b --out ${d}/c2.h5)
kvlab_fails("--prompt-file '${d}/adir' is a directory; a file is expected"
            dump --llama2c ${d}/x.npy --tokenizer ${d}/x.npy --prompt-file ${d}/adir)
kvlab_fails("--input '${d}/adir' is a directory" quantize --input ${d}/adir --quantizer bits=2 --out ${d}/q.npz)
kvlab_fails("--input '${d}/nope.npy': No such file or directory" kmeans --input ${d}/nope.npy --k 2 --out ${d}/k.npz)
kvlab_fails("--out '${d}/adir' is a directory; give a file name" synth --preset tiny --out ${d}/adir)
kvlab_fails("--out '${d}/none/r.json': directory '${d}/none': No such file or directory" eval ${t} --quiet --out ${d}/none/r.json)

# --- 3. No command writes over its input: each refuses, and the input keeps its bytes. ---
file(CREATE_LINK ${t} ${d}/t_symlink.h5 SYMBOLIC)
file(CREATE_LINK ${t} ${d}/t_hardlink.h5)
file(CREATE_LINK ${d}/x.npy ${d}/x_symlink.npy SYMBOLIC)
file(CREATE_LINK ${t} ${d}/s2_ranking.csv SYMBOLIC)  # sensitivity's sibling output
file(SHA256 ${t} t_sum)
file(SHA256 ${d}/x.npy x_sum)
file(SHA256 ${d}/cb.h5 cb_sum)
set(same "is the same file as the input")
kvlab_fails("--out '${t}' ${same} DUMP" eval ${t} --quiet --out ${t})
kvlab_fails("--out '${d}/./t.h5' ${same} DUMP" eval ${t} --quiet --out ${d}/./t.h5)
kvlab_fails("--out '${d}/cb.h5' ${same} --methods '${d}/cb.h5'" eval ${t} --quiet --methods vq:codebooks=${d}/cb.h5 --out ${d}/cb.h5)
kvlab_fails("--out '${d}/t_symlink.h5' ${same} DUMP" sensitivity ${t} --quiet --out ${d}/t_symlink.h5)
kvlab_fails("--out '${d}/s2_ranking.csv' ${same} DUMP" sensitivity ${t} --quiet --out ${d}/s2.csv)
kvlab_fails("--out '${d}/t_hardlink.h5' ${same} DUMP" boost-sweep ${t} --quiet --out ${d}/t_hardlink.h5)
kvlab_fails("--out '${t}' ${same} DUMP" vq train ${t} --spec CQ-4c4b --out ${t})
kvlab_fails("--out '${t}' ${same} --dump" vq reorder ${d}/cb.h5 --dump ${t} --reg-bytes 64 --smem-bytes 64 --out ${t})
kvlab_fails("--out '${d}/cb.h5' ${same} codebooks" vq reorder ${d}/cb.h5 --dump ${t} --reg-bytes 64 --smem-bytes 64 --out ${d}/cb.h5)
kvlab_fails("--out '${d}/x_symlink.npy' ${same} --input" quantize --input ${d}/x.npy --quantizer bits=2 --out ${d}/x_symlink.npy)
kvlab_fails("--out '${d}/x.npy' ${same} --input" kmeans --input ${d}/x.npy --k 4 --out ${d}/x.npy)
kvlab_fails("--out '${d}/w.npy' ${same} --weights" kmeans --input ${d}/x.npy --weights ${d}/w.npy --k 4 --out ${d}/w.npy)
kvlab_fails("--out '${d}/x.npy' ${same} --llama2c" dump --llama2c ${d}/x.npy --tokenizer ${d}/w.npy --prompt a --out ${d}/x.npy)
kvlab_fails("--out '${d}/w.npy' ${same} --tokenizer" dump --llama2c ${d}/x.npy --tokenizer ${d}/w.npy --prompt a --out ${d}/w.npy)
file(SHA256 ${t} t_after)
file(SHA256 ${d}/x.npy x_after)
file(SHA256 ${d}/cb.h5 cb_after)
if(NOT t_sum STREQUAL t_after OR NOT x_sum STREQUAL x_after OR NOT cb_sum STREQUAL cb_after)
  message(FATAL_ERROR "an input changed although every command above refused to write over it")
endif()
# The documented in-place default of vq reorder (no --out) still works.
kvlab_ok(vq reorder ${d}/cb.h5 --dump ${t} --reg-bytes 64 --smem-bytes 64)
file(GLOB left ${d}/*.tmp.*)
if(left)
  message(FATAL_ERROR "temporary files left behind: ${left}")
endif()
file(REMOVE_RECURSE ${d})
