# The boundary layout is written once, in two places that must say the same: the comment at the top
# of hetero/include/zipccl/hetero/batch.h (between "// <layout>" and "// </layout>") and
# docs/notes/hetero.md (between "<!-- layout -->" and "<!-- /layout -->").
#   cmake -DHEADER=batch.h -DDOC=hetero.md -P layout_doc_check.cmake
# (Read whole and cut with string(FIND): the text holds ';' and '[', which CMake lists would split.)
function(between file begin end out)
  file(READ ${file} text)
  string(FIND "${text}" "${begin}\n" a)
  string(FIND "${text}" "${end}" b)
  if(a LESS 0 OR b LESS a)
    message(FATAL_ERROR "${file}: no '${begin}' ... '${end}' block")
  endif()
  string(LENGTH "${begin}\n" n)
  math(EXPR a "${a} + ${n}")
  math(EXPR n "${b} - ${a}")
  string(SUBSTRING "${text}" ${a} ${n} text)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

between(${HEADER} "// <layout>" "// </layout>" from_header)
between(${DOC} "<!-- layout -->" "<!-- /layout -->" from_doc)
# The comment's lines without their "// " (or a bare "//").
string(REPLACE "\n//\n" "\n\n" from_header "\n${from_header}")
string(REPLACE "\n// " "\n" from_header "${from_header}")
string(SUBSTRING "${from_header}" 1 -1 from_header)
if(NOT "${from_header}" STREQUAL "${from_doc}")
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/layout_from_header.txt "${from_header}")
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/layout_from_doc.txt "${from_doc}")
  message(FATAL_ERROR "the boundary layout in ${HEADER} and ${DOC} differ: diff "
                      "${CMAKE_CURRENT_BINARY_DIR}/layout_from_header.txt layout_from_doc.txt")
endif()
string(LENGTH "${from_doc}" n)
message(STATUS "the boundary layout: the same ${n} characters in both")
