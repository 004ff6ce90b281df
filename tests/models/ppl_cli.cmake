# ctest cli_ppl: `kvlab ppl` end to end on stories260K (llama2.c) and the reference model
# (Hugging Face): the table, the JSON keys, layer subsets and windows, kvquant and a plan, and
# each bad input's message naming the parameter.
# Run as cmake -DKVLAB=<kvlab> -DSRC=<source dir> -DDIR=<scratch dir> -P ppl_cli.cmake
set(model ${SRC}/data/stories260K/stories260K.bin)
set(tok ${SRC}/data/stories260K/tok512.bin)
set(ref ${SRC}/data/kvlab-ref-18m)
set(d ${DIR}/ppl_cli)
file(REMOVE_RECURSE ${d})
file(MAKE_DIRECTORY ${d})
function(kvlab_ok)
  execute_process(COMMAND ${KVLAB} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvlab ${ARGN} failed (${rc}): ${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
function(kvlab_fails needle)
  execute_process(COMMAND ${KVLAB} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 1 OR NOT err MATCHES "${needle}")
    message(FATAL_ERROR "kvlab ${ARGN}: expected exit 1 naming '${needle}', got rc ${rc}: ${err}")
  endif()
endfunction()

file(WRITE ${d}/story.txt "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. \
One day, she saw a big red ball under a tree. She ran to the ball and kicked it very hard. The ball flew over the fence \
and Lily was sad. Her mom came and helped her get the ball back. Lily was happy again and said thank you.\n")
if(EXISTS ${model})
  kvlab_ok(ppl --llama2c ${model} --tokenizer ${tok} --text-file ${d}/story.txt --quiet
           --methods kivi:group=16,residual=16,sink=4,kitty:group=16,residual=8,sink=4)
  if(NOT out MATCHES "fp16 +16.00 +[0-9.]+ +\\+0.0000" OR NOT out MATCHES "\nkitty:group=16,residual=8,sink=4 ")
    message(FATAL_ERROR "unexpected table:\n${out}")
  endif()
  kvlab_fails("--llama2c with --text-file needs --tokenizer" ppl --llama2c ${model} --text-file ${d}/story.txt)
  file(WRITE ${d}/empty.txt "")
  kvlab_fails("--text-file '.*empty.txt' is empty" ppl --llama2c ${model} --tokenizer ${tok} --text-file ${d}/empty.txt)
  # a codebook of stories260K (head_dim 8) for the reference model (head_dim 128)
  kvlab_ok(vq train --spec CQ-4c8b --iters 2 --out ${d}/cb.h5)
endif()

if(EXISTS ${ref}/model.safetensors)
  set(hf --model ${ref} --text-file ${ref}/heldout.txt --quiet)
  kvlab_ok(ppl ${hf} --window 96 --windows 2 --quant-layers 0,3-4 --generate 8
           --methods kivi:group=32,residual=16,sink=4 --format json --out ${d}/r.json)
  file(READ ${d}/r.json json)
  foreach(key name bits_per_element ppl delta_ppl kl_mean kl_max top1_agreement greedy_divergence)
    string(JSON v ERROR_VARIABLE e GET "${json}" methods 1 ${key})
    if(e)
      message(FATAL_ERROR "r.json lacks methods[1].${key}: ${e}")
    endif()
  endforeach()
  string(JSON nw LENGTH "${json}" methods 1 windows)
  string(JSON layers GET "${json}" quantized_layers)
  string(JSON kl GET "${json}" methods 1 kl_mean)
  if(NOT nw EQUAL 2 OR NOT layers MATCHES "0, 3, 4" OR NOT kl GREATER 0)
    message(FATAL_ERROR "r.json: ${nw} windows, layers ${layers}, kl_mean ${kl}")
  endif()
  # kvquant with key levels from another text's dump (the story, not heldout.txt), and a plan
  # whose layers decode by their own rules (kvquant on layer 0); each says what it learned from
  kvlab_ok(dump --model ${ref} --prompt-file ${d}/story.txt --steps 0 --out ${d}/calib.h5)
  set(kvq "kvquant:kbits=2,vbits=2,outliers=0.01,calib=dump:${d}/calib.h5")
  set(kv "kivi:group=32,residual=16,sink=4")
  file(WRITE ${d}/plan.json "{\"format\": \"kvlab-plan\", \"version\": 1, \"budget\": 3.0, \"bits\": 3.0, \
\"metric\": \"kl\", \"calibration\": \"by hand\", \"num_layers\": 6, \"num_kv_heads\": 2, \"head_dim\": 128, \
\"tokens\": 96, \"candidates\": [\"${kvq}\", \"${kv}\"], \"layers\": [{\"layer\": 0, \"method\": \"${kvq}\", \
\"bits\": 2.6, \"error\": 0}, {\"layer\": 1, \"method\": \"${kv}\", \"bits\": 3, \"error\": 0}, {\"layer\": 2, \
\"method\": \"${kv}\", \"bits\": 3, \"error\": 0}, {\"layer\": 3, \"method\": \"${kv}\", \"bits\": 3, \"error\": 0}, \
{\"layer\": 4, \"method\": \"${kv}\", \"bits\": 3, \"error\": 0}, {\"layer\": 5, \"method\": \"${kv}\", \"bits\": 3, \
\"error\": 0}]}")
  kvlab_ok(ppl ${hf} --window 96 --generate 8 --methods ${kvq},plan:file=${d}/plan.json --format json
           --out ${d}/q.json)
  file(READ ${d}/q.json json)
  foreach(i 1 2)
    string(JSON kl GET "${json}" methods ${i} kl_mean)
    string(JSON calib GET "${json}" methods ${i} calibration)
    if(NOT kl GREATER 0 OR NOT calib MATCHES "calib.h5|by hand")
      message(FATAL_ERROR "q.json methods[${i}]: kl_mean ${kl}, calibration '${calib}'")
    endif()
  endforeach()
  kvlab_fails("--methods kvquant-3: .*calib=half.*calib=dump:PATH" ppl ${hf} --methods kvquant-3)
  kvlab_fails("--window 4096 exceeds the model's context of 2048 tokens" ppl ${hf} --window 4096)
  kvlab_fails("--windows 100 of --window 2048 need 204800 tokens; the text has" ppl ${hf} --windows 100)
  kvlab_fails("--methods kivi-2: its group of 128 tokens exceeds the window of 64 tokens" ppl ${hf} --window 64
              --methods kivi-2)
  kvlab_fails("--methods int8: method 'int8:group=all,params=fp16' cannot be decoded: group=all" ppl ${hf}
              --methods int8)
  kvlab_fails("--methods fp8-e4m3: .*dynamic scales" ppl ${hf} --methods fp8-e4m3)
  kvlab_fails("method.*'kivi-9'.*choose one of" ppl ${hf} --methods kivi-9)
  kvlab_fails("--quant-layers '7': entries run 0-5" ppl ${hf} --quant-layers 7)
  kvlab_fails("--out '.*heldout.txt' is the same file as the input --text-file" ppl ${hf} --out ${ref}/heldout.txt)
  if(EXISTS ${d}/cb.h5)
    kvlab_fails("--methods vq:codebooks=.*cb.h5: .*head_dim" ppl ${hf} --window 64 --methods vq:codebooks=${d}/cb.h5)
  endif()
endif()
kvlab_fails("give --model DIR or --llama2c MODEL.bin" ppl --text-file ${d}/story.txt)
kvlab_fails("give --text-file F or --tokens F" ppl --model ${ref})
file(REMOVE_RECURSE ${d})
