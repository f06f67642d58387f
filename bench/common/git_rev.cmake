# Writes ${OUT}: #define MHA_BENCH_GIT_REV "<short hash>[-dirty]" ("unknown"
# outside a git checkout). Run at every build, but the file is only rewritten
# when the revision changed, so nothing recompiles needlessly.
set(rev unknown)
if(GIT_EXECUTABLE)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short HEAD
                  WORKING_DIRECTORY ${SRC} OUTPUT_VARIABLE head RESULT_VARIABLE rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND head)
    set(rev ${head})
    execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no
                    WORKING_DIRECTORY ${SRC} OUTPUT_VARIABLE changes ERROR_QUIET)
    if(changes)
      string(APPEND rev -dirty)
    endif()
  endif()
endif()
file(WRITE ${OUT}.tmp "#define MHA_BENCH_GIT_REV \"${rev}\"\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
