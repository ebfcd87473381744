dnl FX_CHECK_HWLOC: optional (Debian: libhwloc-dev). Chooses the NICs nearest
dnl a GPU for FABXFER_RAILS=auto. --with-hwloc asks for it (error if
dnl missing), --without-hwloc skips it. Defines HAVE_HWLOC 0/1.
AC_DEFUN([FX_CHECK_HWLOC], [
  AC_ARG_WITH([hwloc],
    [AS_HELP_STRING([--with-hwloc], [NIC choice by PCIe distance to the GPU (default: if found)])],
    [], [with_hwloc=check])
  fx_have_hwloc=no
  AS_IF([test "x$with_hwloc" != xno],
        [PKG_CHECK_MODULES([HWLOC], [hwloc >= 2.0], [fx_have_hwloc=yes],
           [AS_IF([test "x$with_hwloc" = xyes],
                  [AC_MSG_ERROR([--with-hwloc was given but hwloc >= 2.0 was not found])])])])
  AS_IF([test "x$fx_have_hwloc" = xyes],
        [AC_DEFINE([HAVE_HWLOC], [1], [hwloc for NIC choice])],
        [AC_DEFINE([HAVE_HWLOC], [0], [hwloc for NIC choice])])
  AM_CONDITIONAL([HAVE_HWLOC], [test "x$fx_have_hwloc" = xyes])
])
