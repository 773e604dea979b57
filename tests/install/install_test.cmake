# Installs the build tree into a fresh prefix, then configures, builds and runs tests/install/consumer
# against that prefix only (find_package(zipccl) -> zipccl::codec, zipccl::hetero).
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DSOURCE_DIR=... -DCXX=... [-DSANITIZE=address,undefined]
#         [-DEXPECT_PLUGIN=ON] [-DEXPECT_TOOL=ON] [-DEXPECT_CAPI=ON -DCC=...] -P install_test.cmake
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

set(expected include/zipccl/codec.h include/zipccl/hetero/hetero.h include/zipccl/hetero/layout.h)
if(EXPECT_TOOL)
  list(APPEND expected bin/zipccl)
endif()
foreach(f IN LISTS expected)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
file(GLOB_RECURSE configs ${prefix}/*/zipcclConfig.cmake)
file(GLOB_RECURSE plugins ${prefix}/*/libnccl-net-zipccl.so)
if(NOT configs)
  message(FATAL_ERROR "not installed: lib*/cmake/zipccl/zipcclConfig.cmake")
endif()
if(EXPECT_PLUGIN AND NOT plugins)
  message(FATAL_ERROR "not installed: lib*/libnccl-net-zipccl.so")
endif()
if(EXPECT_TOOL)
  run("installed zipccl --help" ${prefix}/bin/zipccl --help)
  if(NOT run_output MATCHES "inspect")
    message(FATAL_ERROR "installed zipccl --help does not list inspect:\n${run_output}")
  endif()
endif()

# The consumer sees only the prefix: no package registry, no build tree. No optimisation: it only
# has to link and run, and compiling the hetero headers at -O3 (with sanitizers) costs most of the test.
set(flags "")
if(SANITIZE)
  set(flags "-fsanitize=${SANITIZE}")
endif()
run("configuring the consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build
    -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
run("building the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run("running the consumer" ${WORK_DIR}/build/consumer)
if(NOT run_output MATCHES "hetero: 2 modules, llm dp=2, encoder dp=4")
  message(FATAL_ERROR "unexpected consumer output:\n${run_output}")
endif()
message(STATUS "${run_output}")

# The C API: libzipccl.so and zipccl_c.h, found as zipccl::capi by a C project.
if(EXPECT_CAPI)
  if(NOT EXISTS ${prefix}/include/zipccl/zipccl_c.h)
    message(FATAL_ERROR "not installed: include/zipccl/zipccl_c.h")
  endif()
  run("configuring the C API consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/capi_consumer
      -B ${WORK_DIR}/capi_build -DCMAKE_BUILD_TYPE= -DCMAKE_C_COMPILER=${CC} -DCMAKE_PREFIX_PATH=${prefix}
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "-DCMAKE_C_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
  run("building the C API consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/capi_build)
  run("running the C API consumer" ${WORK_DIR}/capi_build/capi_consumer)
  if(NOT run_output MATCHES "capi: 131072 -> [0-9]+ bytes, ABI [0-9]+")
    message(FATAL_ERROR "unexpected C API consumer output:\n${run_output}")
  endif()
  message(STATUS "${run_output}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
