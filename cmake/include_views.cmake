# Include views: the build enforces which parts of the tree may include which
# (docs/design.md, "Parts and arrows"). A view is a folder in the build tree
# holding symbolic links to the headers or folders one part may see; a target
# gets views as include directories instead of the source root, so an include
# of anything outside them fails to compile ("No such file or directory").
#
# clchat_include_view(NAME PATH...) links each PATH (relative to the source
# root: a header or a folder) into ${CMAKE_BINARY_DIR}/include_views/NAME and
# sets CLCHAT_VIEW_<NAME> to that folder in the caller's scope.
function(clchat_include_view name)
  set(dir ${CMAKE_BINARY_DIR}/include_views/${name})
  file(REMOVE_RECURSE ${dir})
  foreach(path IN LISTS ARGN)
    if(NOT EXISTS ${CMAKE_SOURCE_DIR}/${path})
      message(FATAL_ERROR "include view ${name}: ${path} does not exist")
    endif()
    get_filename_component(parent ${dir}/${path} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${path} ${dir}/${path} SYMBOLIC)
  endforeach()
  set(CLCHAT_VIEW_${name} ${dir} PARENT_SCOPE)
endfunction()

# clchat_arrow_check(NAME TARGET HEADER ALLOWED): a test that compiles a file
# holding only `#include "HEADER"` with the include directories TARGET's own
# sources get. ALLOWED true: it must compile; false: it must fail with
# "HEADER: No such file or directory" (any other failure fails the test).
# The checks build on demand (EXCLUDE_FROM_ALL) and share one lock, so two
# never run the build tool in this tree at once.
function(clchat_arrow_check name target header allowed)
  set(src ${CMAKE_BINARY_DIR}/arrow_checks/${name}.cpp)
  file(WRITE ${src} "#include \"${header}\"\n")
  set(obj arrow_check_${name})
  add_library(${obj} OBJECT EXCLUDE_FROM_ALL ${src})
  target_include_directories(${obj} PRIVATE $<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>)
  target_compile_definitions(${obj} PRIVATE $<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>)
  add_test(NAME Architecture.${name}
           COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target ${obj})
  if(allowed)
    set_tests_properties(Architecture.${name} PROPERTIES RESOURCE_LOCK build_tree)
  else()
    string(REPLACE "." "\\." header_re ${header})
    set_tests_properties(Architecture.${name} PROPERTIES RESOURCE_LOCK build_tree
                         PASS_REGULAR_EXPRESSION "${header_re}: No such file or directory")
  endif()
endfunction()
