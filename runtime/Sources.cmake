# The runtime library's sources: included by CMakeLists.txt here, and by
# fuzz/CMakeLists.txt, whose host API fuzzer compiles them in (without MPI).
# A step's interface and the checkpoint format have one definition, shared
# with the compiler's tools: their sources (standard C++, no LLVM) live in
# lib/StepInterface and lib/Checkpoint, and are compiled in here too.
set(DISTOPT_RT_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/Alloc.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Comm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Elements.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Matmul.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/MpiTransport.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Nccl.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Runtime.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Session.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/SessionHyperparameters.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/SessionRun.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/SessionTensors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/StagedCollectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Step.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/Threads.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../lib/StepInterface/JSON.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../lib/StepInterface/StepInterface.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../lib/StepInterface/WriteInterface.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../lib/Checkpoint/Checkpoint.cpp
  )
