# ctests eval_default_dump_make / _reuse: `kvlab eval` with no dump makes the reference model's
# dump once into --cache-dir (STEP=make, the fixture: the cache is emptied first; two processes at
# once make it once between them), then reuses it
# untouched with the same numbers (STEP=reuse). Without the model directory it names what to pass.
# Run as cmake -DKVLAB=<kvlab> -DCACHE=<cache dir> -DSTEP=make|reuse -P default_dump_cli.cmake
set(args eval --layers 0 --methods kivi-2 --queries last:16 --format json --cache-dir ${CACHE})
function(eval_default expect)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=KVLAB_DEFAULT_DUMP ${KVLAB} ${args}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT err MATCHES "${expect}")
    message(FATAL_ERROR "kvlab ${args}: expected success and '${expect}' on stderr, got rc ${rc}: ${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
function(the_dump var)
  file(GLOB dumps ${CACHE}/kvlab-ref-18m-2048-*.h5)
  list(LENGTH dumps n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected one cached dump in ${CACHE}, found ${n}: ${dumps}")
  endif()
  if(NOT EXISTS ${dumps}.fnv64)
    message(FATAL_ERROR "no checksum file beside ${dumps}")
  endif()
  set(${var} ${dumps} PARENT_SCOPE)
endfunction()

if(STEP STREQUAL "make")
  file(REMOVE_RECURSE ${CACHE})
  # Two at once (a pipeline runs its commands side by side; the first writes to a file, not to
  # the pipe): one makes it, the other waits for the lock and reuses it.
  file(MAKE_DIRECTORY ${CACHE})
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=KVLAB_DEFAULT_DUMP ${KVLAB} ${args} --out ${CACHE}/other.json
                  COMMAND ${CMAKE_COMMAND} -E env --unset=KVLAB_DEFAULT_DUMP ${KVLAB} ${args}
                  RESULTS_VARIABLE rcs OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX MATCHALL "making the reference model's dump" made "${err}")
  string(REGEX MATCHALL "using the reference model's dump [^\n]*cached" used "${err}")
  list(LENGTH made n_made)
  list(LENGTH used n_used)
  if(NOT rcs STREQUAL "0;0" OR NOT n_made EQUAL 1 OR NOT n_used EQUAL 1)
    message(FATAL_ERROR "two evals at once: expected exit 0;0, one maker and one reuser, got ${rcs}:\n${err}")
  endif()
  the_dump(dump)
  if(NOT out MATCHES "\"num_layers\": 6" OR NOT out MATCHES "\"head_dim\": 128" OR NOT out MATCHES "\"tokens\": 2048")
    message(FATAL_ERROR "the default dump is not the reference model's 6 layers x 2048 tokens x 128:\n${out}")
  endif()
  file(WRITE ${CACHE}/first.json "${out}")
  # No model directory (an install without data/): the error says what to pass.
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=KVLAB_DEFAULT_DUMP KVLAB_REF_MODEL=${CACHE}/no-model
                          ${KVLAB} ${args} RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "no-model.*pass a dump")
    message(FATAL_ERROR "a missing model directory: expected an error naming it and what to pass, got rc ${rc}: ${err}")
  endif()
elseif(STEP STREQUAL "reuse")
  the_dump(dump)
  file(TIMESTAMP ${dump} before "%Y-%m-%d %H:%M:%S" UTC)
  eval_default("using the reference model's dump .*cached")
  the_dump(again)
  file(TIMESTAMP ${again} after "%Y-%m-%d %H:%M:%S" UTC)
  if(NOT again STREQUAL dump OR NOT before STREQUAL after)
    message(FATAL_ERROR "the cached dump was replaced: ${dump} (${before}) -> ${again} (${after})")
  endif()
  file(READ ${CACHE}/first.json first)
  # The numbers: everything from "methods" on (timing_s comes before it).
  string(FIND "${first}" "\"methods\":" at)
  string(SUBSTRING "${first}" ${at} -1 first)
  string(FIND "${out}" "\"methods\":" at)
  string(SUBSTRING "${out}" ${at} -1 out)
  if(NOT first STREQUAL out)
    message(FATAL_ERROR "the cached dump gives other numbers than the fresh one:\n${first}\n---\n${out}")
  endif()
else()
  message(FATAL_ERROR "STEP must be make or reuse")
endif()
