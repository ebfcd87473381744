dnl FX_CHECK_CUDA: optional. Auto-detected in /usr/local/cuda;
dnl --with-cuda=DIR asks for it (error if missing). Defines HAVE_CUDA 0/1.
AC_DEFUN([FX_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
                    [CUDA memory support (default: /usr/local/cuda if found)])],
    [], [with_cuda=check])
  fx_have_cuda=no
  CUDA_CPPFLAGS=
  CUDA_LDFLAGS=
  CUDA_LIBS=
  AS_IF([test "x$with_cuda" != xno], [
    AS_CASE([$with_cuda], [yes|check], [fx_cuda_dir=/usr/local/cuda],
            [fx_cuda_dir=$with_cuda])
    CUDA_CPPFLAGS="-I$fx_cuda_dir/include"
    CUDA_LDFLAGS="-L$fx_cuda_dir/lib64"
    fx_save_CPPFLAGS=$CPPFLAGS
    fx_save_LDFLAGS=$LDFLAGS
    CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
    LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
    AC_CHECK_HEADER([cuda_runtime_api.h],
      [AC_CHECK_LIB([cudart], [cudaGetDeviceCount],
                    [fx_have_cuda=yes; CUDA_LIBS=-lcudart])])
    CPPFLAGS=$fx_save_CPPFLAGS
    LDFLAGS=$fx_save_LDFLAGS
    AS_IF([test "x$fx_have_cuda" = xno && test "x$with_cuda" != xcheck],
          [AC_MSG_ERROR([--with-cuda was given but CUDA was not found in $fx_cuda_dir])])
  ])
  AS_IF([test "x$fx_have_cuda" = xyes],
        [AC_DEFINE([HAVE_CUDA], [1], [CUDA memory support built])],
        [AC_DEFINE([HAVE_CUDA], [0], [CUDA memory support built])
         CUDA_CPPFLAGS=; CUDA_LDFLAGS=; CUDA_LIBS=])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$fx_have_cuda" = xyes])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LDFLAGS])
  AC_SUBST([CUDA_LIBS])
])
