dnl FX_CHECK_FUZZ: optional. The libFuzzer harnesses of tests/fuzz need a
dnl compiler (FUZZ_CC, default clang) that compiles and links with
dnl -fsanitize=fuzzer,address,undefined (Debian: clang, libclang-rt-14-dev).
dnl --enable-fuzz asks for them (error if no such compiler), --disable-fuzz
dnl leaves them out; by default they are built where the compiler is found.
dnl AM_CONDITIONAL HAVE_FUZZ; FUZZ_CC and FUZZ_SANITIZE are substituted.
AC_DEFUN([FX_CHECK_FUZZ], [
  AC_ARG_ENABLE([fuzz],
    [AS_HELP_STRING([--enable-fuzz],
                    [build the libFuzzer harnesses (default: if clang with libFuzzer is found)])],
    [], [enable_fuzz=check])
  AC_ARG_VAR([FUZZ_CC], [compiler for the libFuzzer harnesses (default: clang)])
  fx_have_fuzz=no
  FUZZ_SANITIZE="-fsanitize=fuzzer,address,undefined"
  AS_IF([test "x$enable_fuzz" != xno], [
    AS_IF([test -z "$FUZZ_CC"], [AC_CHECK_PROGS([FUZZ_CC], [clang clang-14])])
    AS_IF([test -n "$FUZZ_CC"], [
      AC_CACHE_CHECK([whether $FUZZ_CC links with $FUZZ_SANITIZE],
                     [fx_cv_fuzz_cc], [
        fx_save_CC=$CC; fx_save_CFLAGS=$CFLAGS; fx_save_LDFLAGS=$LDFLAGS
        fx_save_LIBS=$LIBS
        CC=$FUZZ_CC; CFLAGS="$FUZZ_SANITIZE"; LDFLAGS=; LIBS=
        AC_LINK_IFELSE([AC_LANG_SOURCE([[
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return data == NULL && size > 0;
}
]])], [fx_cv_fuzz_cc=yes], [fx_cv_fuzz_cc=no])
        CC=$fx_save_CC; CFLAGS=$fx_save_CFLAGS; LDFLAGS=$fx_save_LDFLAGS
        LIBS=$fx_save_LIBS])
      fx_have_fuzz=$fx_cv_fuzz_cc])
    AS_IF([test "x$fx_have_fuzz" = xno && test "x$enable_fuzz" = xyes],
          [AC_MSG_ERROR([--enable-fuzz was given but no compiler links with $FUZZ_SANITIZE (install clang and libclang-rt-14-dev, or set FUZZ_CC)])])
  ])
  AM_CONDITIONAL([HAVE_FUZZ], [test "x$fx_have_fuzz" = xyes])
  AC_SUBST([FUZZ_SANITIZE])
])
