# ctest cli_calibration: the calibration commands end to end on the shipped dump — sensitivity,
# boost-sweep, kmeans, vq train/reorder and eval with the vq method — each exits 0 and writes
# what it promises; reordering leaves eval's numbers unchanged; bad input is named.
# Run as cmake -DKVLAB=<kvlab> -DPYTHON=<python3 with numpy> -DDIR=<scratch dir> -P calibration_cli.cmake
function(kvlab_ok)
  execute_process(COMMAND ${KVLAB} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvlab ${ARGN} failed (${rc}): ${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
function(expect_files)
  foreach(f ${ARGN})
    if(NOT EXISTS ${f})
      message(FATAL_ERROR "missing output ${f}")
    endif()
  endforeach()
endfunction()
set(d ${DIR}/calibration_cli)
file(REMOVE_RECURSE ${d})
# The other commands' default dump; eval's default is the reference model's, so it is named.
set(stories ${CMAKE_CURRENT_LIST_DIR}/../../data/stories260K.h5)
file(MAKE_DIRECTORY ${d})

kvlab_ok(sensitivity --quiet --out ${d}/sens.csv)
expect_files(${d}/sens.csv ${d}/sens_ranking.csv ${d}/sens_heatmap.svg)
file(STRINGS ${d}/sens.csv rows)
list(LENGTH rows n)
# 5 layers x 8 q heads x 8 channels + the header
if(NOT n EQUAL 321)
  message(FATAL_ERROR "sens.csv has ${n} lines, expected 321")
endif()

kvlab_ok(boost-sweep --quiet --rates 0,0.25,0.5 --selectors magnitude,random --seeds 2 --out ${d}/sweep.csv)
expect_files(${d}/sweep.csv ${d}/sweep_summary.csv)
execute_process(COMMAND ${KVLAB} boost-sweep --rates 1.5 --out ${d}/bad.csv RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "1.5")
  message(FATAL_ERROR "a rate of 1.5 was not rejected by name: ${err}")
endif()

execute_process(COMMAND ${PYTHON} -c "import numpy as np; np.save('${d}/x.npy', np.random.default_rng(0).standard_normal((2000, 4)).astype(np.float32))"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "numpy could not write the k-means input")
endif()
kvlab_ok(kmeans --input ${d}/x.npy --k 16 --iters 5 --init kmeans++ --out ${d}/c.npz)
expect_files(${d}/c.npz)

kvlab_ok(vq train --spec CQ-4c8b --iters 5 --out ${d}/cb.h5)
kvlab_ok(eval ${stories} --quiet --methods kivi-2,vq:codebooks=${d}/cb.h5 --format csv --out ${d}/before.csv)
kvlab_ok(vq reorder ${d}/cb.h5 --reg-bytes 64 --smem-bytes 1024 --out ${d}/cb_sorted.h5)
kvlab_ok(eval ${stories} --quiet --methods kivi-2,vq:codebooks=${d}/cb_sorted.h5 --format csv --out ${d}/after.csv)
file(READ ${d}/before.csv before)
file(READ ${d}/after.csv after)
string(REPLACE "cb_sorted.h5" "cb.h5" after "${after}")
if(NOT before STREQUAL after)
  message(FATAL_ERROR "eval differs after frequency reordering:\n${before}\nvs\n${after}")
endif()
# vq train / reorder --device: an unknown device is named (cuda is checked on the GPU machine).
execute_process(COMMAND ${KVLAB} vq train --spec CQ-4c8b --iters 1 --device tpu --out ${d}/bad.h5
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "--device 'tpu'")
  message(FATAL_ERROR "vq train --device tpu: expected an error naming --device, got ${rc}: ${err}")
endif()
