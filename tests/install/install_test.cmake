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
# consumer(<folder> <language> <compiler> <expected output regex>): configures, builds and runs
# tests/install/<folder>, whose executable is named after the folder.
function(consumer folder lang compiler expected)
  run("configuring ${folder}" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/${folder} -B ${WORK_DIR}/${folder}
      -DCMAKE_BUILD_TYPE= -DCMAKE_${lang}_COMPILER=${compiler} -DCMAKE_PREFIX_PATH=${prefix}
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "-DCMAKE_${lang}_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
  run("building ${folder}" ${CMAKE_COMMAND} --build ${WORK_DIR}/${folder})
  run("running ${folder}" ${WORK_DIR}/${folder}/${folder})
  if(NOT run_output MATCHES "${expected}")
    message(FATAL_ERROR "unexpected output of ${folder}:\n${run_output}")
  endif()
  message(STATUS "${run_output}")
endfunction()
consumer(consumer CXX ${CXX} "hetero: 2 modules, llm dp=2, encoder dp=4")

# The C API: libzipccl.so and zipccl_c.h, found as zipccl::capi by a C project.
if(EXPECT_CAPI)
  if(NOT EXISTS ${prefix}/include/zipccl/zipccl_c.h)
    message(FATAL_ERROR "not installed: include/zipccl/zipccl_c.h")
  endif()
  consumer(capi_consumer C ${CC} "capi: 131072 -> [0-9]+ bytes, ABI [0-9]+")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
