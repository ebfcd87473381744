dnl FX_CHECK_LIBFABRIC: libfabric is required, version >= 1.17, compiled
dnl against the 1.x API. --with-libfabric=DIR points at a prefix.
AC_DEFUN([FX_CHECK_LIBFABRIC], [
  AC_ARG_WITH([libfabric],
    [AS_HELP_STRING([--with-libfabric@<:@=DIR@:>@],
                    [libfabric prefix (required, >= 1.17)])],
    [], [with_libfabric=yes])
  AS_IF([test "x$with_libfabric" = xno],
        [AC_MSG_ERROR([fabxfer cannot be built without libfabric])])
  FABRIC_CPPFLAGS=
  FABRIC_LDFLAGS=
  AS_IF([test "x$with_libfabric" != xyes],
        [FABRIC_CPPFLAGS="-I$with_libfabric/include"
         AS_IF([test -d "$with_libfabric/lib64"],
               [FABRIC_LDFLAGS="-L$with_libfabric/lib64 -Wl,-rpath,$with_libfabric/lib64"],
               [FABRIC_LDFLAGS="-L$with_libfabric/lib -Wl,-rpath,$with_libfabric/lib"])])
  fx_save_CPPFLAGS=$CPPFLAGS
  fx_save_LDFLAGS=$LDFLAGS
  CPPFLAGS="$CPPFLAGS $FABRIC_CPPFLAGS"
  LDFLAGS="$LDFLAGS $FABRIC_LDFLAGS"
  AC_CHECK_HEADER([rdma/fabric.h], [],
    [AC_MSG_ERROR([rdma/fabric.h not found: install libfabric-dev or pass --with-libfabric=DIR])])
  AC_MSG_CHECKING([for libfabric >= 1.17])
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <rdma/fabric.h>
#if FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION) < FI_VERSION(1, 17)
#error libfabric too old
#endif]], [[(void)fi_version();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([fabxfer needs libfabric 1.17 or newer])])
  AC_COMPUTE_INT([fx_fi_major], [FI_MAJOR_VERSION], [#include <rdma/fabric.h>])
  AC_COMPUTE_INT([fx_fi_minor], [FI_MINOR_VERSION], [#include <rdma/fabric.h>])
  fx_libfabric_version="$fx_fi_major.$fx_fi_minor"
  AC_CHECK_LIB([fabric], [fi_getinfo], [FABRIC_LIBS=-lfabric],
    [AC_MSG_ERROR([libfabric (-lfabric) not found])])
  dnl FI_OPT_MAX_RMA_SIZE (1.18) is asked for only where declared.
  AC_CHECK_DECLS([FI_OPT_MAX_RMA_SIZE], [], [], [[#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>]])
  CPPFLAGS=$fx_save_CPPFLAGS
  LDFLAGS=$fx_save_LDFLAGS
  AC_SUBST([FABRIC_CPPFLAGS])
  AC_SUBST([FABRIC_LDFLAGS])
  AC_SUBST([FABRIC_LIBS])
])
