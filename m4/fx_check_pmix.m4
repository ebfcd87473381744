dnl FX_CHECK_PMIX: optional. Auto-detected; --with-pmix asks for it (error
dnl if missing), --without-pmix leaves it out. Defines HAVE_PMIX 0/1.
dnl Only src/boot/pmix.c includes pmix.h.
AC_DEFUN([FX_CHECK_PMIX], [
  AC_ARG_WITH([pmix],
    [AS_HELP_STRING([--with-pmix@<:@=DIR@:>@],
                    [PMIx bootstrap (default: if found)])],
    [], [with_pmix=check])
  fx_have_pmix=no
  PMIX_CPPFLAGS=
  PMIX_LDFLAGS=
  PMIX_LIBS=
  AS_IF([test "x$with_pmix" != xno], [
    dnl Debian keeps pmix.h under pmix2/include: ask pkg-config first.
    AS_CASE([$with_pmix], [yes|check],
            [AS_IF([test -n "$PKG_CONFIG" && $PKG_CONFIG --exists pmix],
                   [PMIX_CPPFLAGS=`$PKG_CONFIG --cflags pmix`
                    PMIX_LDFLAGS=`$PKG_CONFIG --libs-only-L pmix`])],
            [PMIX_CPPFLAGS="-I$with_pmix/include"
             PMIX_LDFLAGS="-L$with_pmix/lib -Wl,-rpath,$with_pmix/lib"])
    fx_save_CPPFLAGS=$CPPFLAGS
    fx_save_LDFLAGS=$LDFLAGS
    CPPFLAGS="$CPPFLAGS $PMIX_CPPFLAGS"
    LDFLAGS="$LDFLAGS $PMIX_LDFLAGS"
    AC_CHECK_HEADER([pmix.h],
      [AC_CHECK_LIB([pmix], [PMIx_Init],
                    [fx_have_pmix=yes; PMIX_LIBS=-lpmix])])
    CPPFLAGS=$fx_save_CPPFLAGS
    LDFLAGS=$fx_save_LDFLAGS
    AS_IF([test "x$fx_have_pmix" = xno && test "x$with_pmix" != xcheck],
          [AC_MSG_ERROR([--with-pmix was given but pmix.h or libpmix was not found])])
  ])
  AS_IF([test "x$fx_have_pmix" = xyes],
        [AC_DEFINE([HAVE_PMIX], [1], [PMIx bootstrap built])],
        [AC_DEFINE([HAVE_PMIX], [0], [PMIx bootstrap built])
         PMIX_CPPFLAGS=; PMIX_LDFLAGS=])
  AM_CONDITIONAL([HAVE_PMIX], [test "x$fx_have_pmix" = xyes])
  AC_SUBST([PMIX_CPPFLAGS])
  AC_SUBST([PMIX_LDFLAGS])
  AC_SUBST([PMIX_LIBS])
])
