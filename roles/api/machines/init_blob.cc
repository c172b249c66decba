// The box init (box_init.c), built as its own static executable and embedded here, so the
// product stays one binary (README.md §Init). CB_BOX_INIT_PATH is set by CMakeLists.txt.

#include "roles/api/machines/local_internal.h"

#ifndef CB_BOX_INIT_PATH
#error "CB_BOX_INIT_PATH must name the built box init"
#endif

asm(".section .rodata\n"
    ".balign 16\n"
    ".globl cb_box_init_elf_begin\n"
    "cb_box_init_elf_begin:\n"
    ".incbin \"" CB_BOX_INIT_PATH
    "\"\n"
    ".globl cb_box_init_elf_end\n"
    "cb_box_init_elf_end:\n"
    ".previous\n");

extern "C" const unsigned char cb_box_init_elf_begin[];
extern "C" const unsigned char cb_box_init_elf_end[];

namespace cb::api::machines::internal {

std::span<const unsigned char> box_init_elf() {
  return {cb_box_init_elf_begin,
          static_cast<std::size_t>(cb_box_init_elf_end - cb_box_init_elf_begin)};
}

}  // namespace cb::api::machines::internal
