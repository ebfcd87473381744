dnl FX_CHECK_CUDA: optional. Auto-detected in /usr/local/cuda;
dnl --with-cuda=DIR asks for it (error if missing), --without-cuda skips it.
dnl Needs cuda.h and nvcc (to build the gather kernel's fatbin, embedded
dnl with bin2c). Nothing is linked: the driver is dlopen'ed at run time.
dnl Defines HAVE_CUDA 0/1 and substitutes CUDA_CPPFLAGS, NVCC, BIN2C.
AC_DEFUN([FX_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
                    [CUDA memory support (default: /usr/local/cuda if found)])],
    [], [with_cuda=check])
  fx_have_cuda=no
  CUDA_CPPFLAGS=
  NVCC=
  BIN2C=
  AS_IF([test "x$with_cuda" != xno], [
    AS_CASE([$with_cuda], [yes|check], [fx_cuda_dir=/usr/local/cuda],
            [fx_cuda_dir=$with_cuda])
    CUDA_CPPFLAGS="-I$fx_cuda_dir/include"
    fx_save_CPPFLAGS=$CPPFLAGS
    CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
    AC_CHECK_HEADER([cuda.h], [fx_cuda_h=yes], [fx_cuda_h=no])
    CPPFLAGS=$fx_save_CPPFLAGS
    AC_PATH_PROG([NVCC], [nvcc], [], [$fx_cuda_dir/bin:$PATH])
    AC_PATH_PROG([BIN2C], [bin2c], [], [$fx_cuda_dir/bin:$PATH])
    AS_IF([test "x$fx_cuda_h" = xyes && test -n "$NVCC" && test -n "$BIN2C"],
          [fx_have_cuda=yes])
    AS_IF([test "x$fx_have_cuda" = xno && test "x$with_cuda" != xcheck],
          [AC_MSG_ERROR([--with-cuda was given but cuda.h, nvcc or bin2c was not found in $fx_cuda_dir])])
  ])
  AS_IF([test "x$fx_have_cuda" = xyes],
        [AC_DEFINE([HAVE_CUDA], [1], [CUDA memory support built])
         AC_SEARCH_LIBS([dlopen], [dl])],
        [AC_DEFINE([HAVE_CUDA], [0], [CUDA memory support built])
         CUDA_CPPFLAGS=])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$fx_have_cuda" = xyes])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([NVCC])
  AC_SUBST([BIN2C])
])
