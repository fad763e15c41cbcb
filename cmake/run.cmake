# run(COMMAND...): runs a command (in RUN_DIR if set, else the current directory), prints its output, and stops the script with the
# command, its status and its output if it fails. For the scripts that tests run with cmake -P.
function(run)
  if(NOT RUN_DIR)
    set(RUN_DIR .)
  endif()
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${RUN_DIR})
  message(STATUS "${out}")
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}${err}")
  endif()
endfunction()
