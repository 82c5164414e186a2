! dynres.f90: the dynres client library for Fortran, through ISO_C_BINDING: the
! constants, structs and functions of capi/include/dynres.h that the examples use, and
! helpers (C strings, checked calls). Compile it before the programs that `use dynres`.

module dynres
  use, intrinsic :: iso_c_binding
  implicit none
  integer(c_int), parameter :: DYNRES_OK = 0
  integer(c_int), parameter :: DYNRES_ERR_RC_SLOTS = 1002
  integer(c_int32_t), parameter :: DYNRES_RC_NONE = 0, DYNRES_RC_ADD = 1, DYNRES_RC_SUB = 2
  integer(c_int32_t), parameter :: DYNRES_RC_REPLACE = 3
  integer(c_int32_t), parameter :: DYNRES_STATUS_ANNOUNCED = 1, DYNRES_STATUS_PENDING = 2
  integer(c_int32_t), parameter :: DYNRES_STATUS_FINALIZED = 3
  integer(c_int32_t), parameter :: DYNRES_OP_UNION = 1, DYNRES_OP_DIFFERENCE = 2
  integer, parameter :: DYNRES_PSET_NAME_CAP = 256, DYNRES_VALUE_MAX = 4096
  integer(c_int64_t), parameter :: SEC = 1000000000_c_int64_t
  ! What failure messages start with: each program sets it to its name.
  character(len=32) :: tag = 'dynres'

  type, bind(c) :: dynres_pset_name
    character(kind=c_char) :: name(DYNRES_PSET_NAME_CAP)
  end type

  type, bind(c) :: dynres_res_change
    integer(c_int32_t) :: kind, status, incl
    type(dynres_pset_name) :: delta, sub_delta
  end type

  type, bind(c) :: dynres_accept_result
    integer(c_int32_t) :: status, terminate
    integer(c_int64_t) :: nremoved
    type(dynres_pset_name) :: new_pset
  end type

  type, bind(c) :: dynres_pset_info
    integer(c_int64_t) :: size, version, epoch
    integer(c_int32_t) :: active
  end type

  type, bind(c) :: dynres_change_request
    integer(c_int32_t) :: kind
    type(c_ptr) :: app
    integer(c_int32_t) :: add, sub
    type(c_ptr) :: victims
    integer(c_size_t) :: nvictims
    type(c_ptr) :: bound
  end type

  interface
    integer(c_int) function dynres_session_init(s) bind(c)
      import :: c_int, c_ptr
      type(c_ptr) :: s
    end function
    integer(c_int) function dynres_session_finalize(s) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: s
    end function
    integer(c_int) function dynres_session_rank(s, rank) bind(c)
      import :: c_int, c_ptr, c_int32_t
      type(c_ptr), value :: s
      integer(c_int32_t) :: rank
    end function
    integer(c_int) function dynres_session_app_pset(s, pset) bind(c)
      import :: c_int, c_ptr, dynres_pset_name
      type(c_ptr), value :: s
      type(dynres_pset_name) :: pset
    end function
    integer(c_int) function dynres_get_res_change(s, bound, out) bind(c)
      import :: c_int, c_ptr, dynres_res_change
      type(c_ptr), value :: s, bound
      type(dynres_res_change) :: out
    end function
    integer(c_int) function dynres_get_pset_info(s, pset, out) bind(c)
      import :: c_int, c_ptr, c_char, dynres_pset_info
      type(c_ptr), value :: s
      character(kind=c_char) :: pset(*)
      type(dynres_pset_info) :: out
    end function
    integer(c_int) function dynres_pset_op(s, op, pset1, pset2, target, result) bind(c)
      import :: c_int, c_ptr, c_char, c_int32_t, dynres_pset_name
      type(c_ptr), value :: s
      integer(c_int32_t), value :: op
      character(kind=c_char) :: pset1(*), pset2(*), target(*)
      type(dynres_pset_name) :: result
    end function
    integer(c_int) function dynres_accept_res_change(s, delta, new_pset, bound, out) bind(c)
      import :: c_int, c_ptr, c_char, dynres_accept_result
      type(c_ptr), value :: s, bound
      character(kind=c_char) :: delta(*), new_pset(*)
      type(dynres_accept_result) :: out
    end function
    integer(c_int) function dynres_accept_res_change_blocking(s, delta, new_pset, bound, &
                                                              wait_ns, out) bind(c)
      import :: c_int, c_ptr, c_char, c_int64_t, dynres_accept_result
      type(c_ptr), value :: s, bound
      character(kind=c_char) :: delta(*), new_pset(*)
      integer(c_int64_t), value :: wait_ns
      type(dynres_accept_result) :: out
    end function
    integer(c_int) function dynres_session_removed(s, ranks, cap, count) bind(c)
      import :: c_int, c_ptr, c_int32_t, c_size_t
      type(c_ptr), value :: s
      integer(c_int32_t) :: ranks(*)
      integer(c_size_t), value :: cap
      integer(c_size_t) :: count
    end function
    integer(c_int) function dynres_confirm_res_change(s, delta, timeout_ns, new_pset) bind(c)
      import :: c_int, c_ptr, c_char, c_int64_t, dynres_pset_name
      type(c_ptr), value :: s
      character(kind=c_char) :: delta(*)
      integer(c_int64_t), value :: timeout_ns
      type(dynres_pset_name) :: new_pset
    end function
    integer(c_int) function dynres_request_res_change(s, req, delta, queued) bind(c)
      import :: c_int, c_ptr, dynres_change_request, dynres_pset_name
      type(c_ptr), value :: s
      type(dynres_change_request) :: req
      type(dynres_pset_name) :: delta
      integer(c_int) :: queued
    end function
    integer(c_int) function dynres_publish(s, key, value) bind(c)
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: s
      character(kind=c_char) :: key(*), value(*)
    end function
    integer(c_int) function dynres_unpublish(s, key) bind(c)
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: s
      character(kind=c_char) :: key(*)
    end function
    integer(c_int) function dynres_lookup(s, key, wait_ns, value, cap, len) bind(c)
      import :: c_int, c_ptr, c_char, c_int64_t, c_size_t
      type(c_ptr), value :: s
      character(kind=c_char) :: key(*), value(*)
      integer(c_int64_t), value :: wait_ns
      integer(c_size_t), value :: cap
      integer(c_size_t) :: len
    end function
    integer(c_int) function dynres_fence(s, pset, timeout_ns) bind(c)
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: s
      character(kind=c_char) :: pset(*)
      integer(c_int64_t), value :: timeout_ns
    end function
    type(c_ptr) function dynres_last_error() bind(c)
      import :: c_ptr
    end function
  end interface

contains

  ! A NUL-terminated C string as a Fortran string.
  function from_c(chars) result(str)
    character(kind=c_char), intent(in) :: chars(:)
    character(len=:), allocatable :: str
    integer :: n
    n = 0
    do while (n < size(chars))
      if (chars(n + 1) == c_null_char) exit
      n = n + 1
    end do
    allocate (character(len=n) :: str)
    str = transfer(chars(1:n), str)
  end function

  ! The message of the last error on this thread.
  function last_error() result(str)
    character(len=:), allocatable :: str
    character(kind=c_char), pointer :: chars(:)
    call c_f_pointer(dynres_last_error(), chars, [4096])
    str = from_c(chars)
  end function

  subroutine check(rc, what)
    integer(c_int), intent(in) :: rc
    character(*), intent(in) :: what
    if (rc /= DYNRES_OK) then
      write (0, '(a,a,a,a,i0,a,a)') trim(tag), ': FAILED: ', what, ': error ', rc, ': ', &
        last_error()
      error stop 1
    end if
  end subroutine
end module
