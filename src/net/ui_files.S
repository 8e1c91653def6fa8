/* The dashboard's files (src/ui/), assembled into read-only data with .incbin: no generator
 * and no build dependency beyond gcc (or clang) itself. The Makefile makes this object depend on
 * every file under src/ui/, so editing one rebuilds it. Paths are relative to the directory make
 * runs in (the repository's root), where the assembler looks first. Each file gets a start and
 * an end symbol; net/ui.c turns them into (data, length) pairs. */
#define UI_FILE(sym, file)     \
    .globl sym;                \
    .type sym, @object;        \
    .balign 16;                \
sym:                           \
    .incbin file;              \
    .globl sym##_end;          \
sym##_end:                     \
    .byte 0

    .section .rodata
UI_FILE(sb_ui_index_html, "src/ui/index.html")
UI_FILE(sb_ui_app_js, "src/ui/app.js")
UI_FILE(sb_ui_app_css, "src/ui/app.css")

/* Read-only data only: without this note the linker would mark the stack executable. */
    .section .note.GNU-stack, "", @progbits
