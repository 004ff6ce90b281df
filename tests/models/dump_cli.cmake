# ctest cli_dump_tokenize: `kvlab dump` on token ids (--tokens, --logits) with the shipped
# llama2.c model, and the errors of bad command lines, token files and model directories.
# (Hugging Face directories end to end: tests/python/test_hf_runner.py.)
# Run as cmake -DKVLAB=<kvlab> -DSRC=<source dir> -DDIR=<scratch dir> -P dump_cli.cmake
set(model ${SRC}/data/stories260K/stories260K.bin)
set(tok ${SRC}/data/stories260K/tok512.bin)
function(kvlab_ok)
  execute_process(COMMAND ${KVLAB} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvlab ${ARGN} failed (${rc}): ${err}")
  endif()
  set(err "${err}" PARENT_SCOPE)
endfunction()
function(kvlab_fails needle)
  execute_process(COMMAND ${KVLAB} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 1 OR NOT err MATCHES "${needle}")
    message(FATAL_ERROR "kvlab ${ARGN}: expected exit 1 naming '${needle}', got rc ${rc}: ${err}")
  endif()
endfunction()

if(EXISTS ${model})
  # Five token ids, then 3 greedy tokens; the logits of all 8 positions.
  file(WRITE ${DIR}/ids.txt "1, 403, 407, 261, 378\n")
  kvlab_ok(dump --llama2c ${model} --tokens ${DIR}/ids.txt --steps 3 --logits ${DIR}/logits.npy --out ${DIR}/ids.h5)
  if(NOT err MATCHES "8 tokens \\(5 prompt \\+ 3 generated\\)")
    message(FATAL_ERROR "unexpected summary: ${err}")
  endif()
  file(SIZE ${DIR}/logits.npy size)
  if(NOT size EQUAL 16512)  # 128-byte header + 8 x 512 float32
    message(FATAL_ERROR "logits.npy has ${size} bytes, expected 16512 (8 x 512 float32)")
  endif()
  kvlab_fails("--llama2c with a prompt needs --tokenizer" dump --llama2c ${model} --prompt hi --out ${DIR}/x.h5)
  file(WRITE ${DIR}/bad_ids.txt "1 2 x3 4")
  kvlab_fails("bad_ids.txt': token 2 = 'x3' is not a token id" dump --llama2c ${model} --tokens ${DIR}/bad_ids.txt
              --out ${DIR}/x.h5)
  file(WRITE ${DIR}/big_ids.txt "1 512")
  kvlab_fails("token 512 at position 1 outside the vocabulary \\[0, 512\\)" dump --llama2c ${model} --tokens
              ${DIR}/big_ids.txt --out ${DIR}/x.h5)
  # No output may be one of the inputs (compared by inode): --logits over the token file.
  kvlab_fails("--logits '.*ids.txt' is the same file as the input --tokens" dump --llama2c ${model} --tokens ${DIR}/ids.txt
              --steps 0 --logits ${DIR}/ids.txt --out ${DIR}/x.h5)
  file(REMOVE ${DIR}/ids.h5 ${DIR}/logits.npy)
endif()
kvlab_fails("give --llama2c MODEL.bin or --model DIR" dump --prompt hi)
kvlab_fails("give --prompt TEXT, --prompt-file FILE or --tokens FILE" dump --model ${DIR})
kvlab_fails("nowhere': not a directory" dump --model ${DIR}/nowhere --prompt hi)
file(MAKE_DIRECTORY ${DIR}/empty_model)
kvlab_fails("empty_model/config.json': not found" dump --model ${DIR}/empty_model --prompt hi)
file(WRITE ${DIR}/not_a_tokenizer.json "{\"model\": {\"type\": \"WordPiece\"}}")
kvlab_fails("not_a_tokenizer.json': pre_tokenizer is null" tokenize --tokenizer ${DIR}/not_a_tokenizer.json --prompt hi)
kvlab_fails("give --model DIR or --tokenizer FILE" tokenize --prompt hi)
file(WRITE ${DIR}/prompt.txt "hello")
kvlab_fails("--out '.*prompt.txt' is the same file as the input --prompt-file" tokenize --tokenizer ${DIR}/not_a_tokenizer.json
            --prompt-file ${DIR}/prompt.txt --out ${DIR}/prompt.txt)
file(READ ${DIR}/prompt.txt kept)
if(NOT kept STREQUAL "hello")
  message(FATAL_ERROR "tokenize changed its own input: '${kept}'")
endif()
