# zipccl_plugin_room(TARGET [OBJECT] SOURCES...): one room of the plugin (docs/ARCHITECTURE.md), an
# internal library that libnccl-net-zipccl.so, the tests and the tool link instead of naming its
# sources. Static by default: a consumer gets the rooms below it through the link. OBJECT for a room
# whose code nothing calls by name (the exported ABI tables, the test doubles' registration), which a
# static archive would drop. Compiled hidden, as the shared object exports only the ABI tables.
function(zipccl_plugin_room target)
  cmake_parse_arguments(R "OBJECT" "" "SOURCES" ${ARGN})
  if(R_OBJECT)
    add_library(${target} OBJECT ${R_SOURCES})
  else()
    add_library(${target} STATIC ${R_SOURCES})
  endif()
  set_target_properties(${target} PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  # Includes name the room: "layer/comm.h", "transport.h", "nccl/net_v11.h", "testing/...".
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/plugin/src ${PROJECT_SOURCE_DIR}/plugin)
endfunction()
