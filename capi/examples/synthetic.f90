! synthetic.f90: the synthetic malleable loop of the thesis (Lst. 6.7) in Fortran, over
! dynres' client library through ISO_C_BINDING (module dynres, dynres.f90). The same
! loop as synthetic.c (see its header for the protocol between the root and the others):
!
!   dynres run -n 2 --max 8 -- ./synthetic_f PLAN ITERATIONS FREQ [-b]
!
! The root checks that the job went through the sizes the plan implies and prints
! "synthetic.f90: sizes 2 4 2 ... as planned"; the exit status is 0 only then.

program synthetic_f
  use dynres
  implicit none
  integer, parameter :: MAXPLAN = 32, MAXRANKS = 1024
  type(c_ptr) :: s
  integer(c_int32_t) :: rank, removed(MAXRANKS)
  integer(c_int) :: rc, queued
  integer(c_size_t) :: vlen
  type(dynres_pset_name) :: app_name, result, new_name
  type(dynres_res_change) :: me, q
  type(dynres_accept_result) :: a
  type(dynres_pset_info) :: info
  type(dynres_change_request) :: req
  character(kind=c_char), target :: self_set(11) = [character(kind=c_char) :: &
                                                    'm', 'p', 'i', ':', '/', '/', 'S', 'E', 'L', 'F', c_null_char]
  character(kind=c_char) :: value(DYNRES_VALUE_MAX + 1)
  character(len=:), allocatable :: app, delta
  character(len=64) :: arg
  character(len=DYNRES_VALUE_MAX) :: line
  integer :: plan(MAXPLAN), nplan, next_item, freq, iterations, it, i, j, k, stop_flag
  integer :: nsizes, outstanding, pkind, nprocs, n_out
  integer(c_int64_t) :: refused_since, clock_now, clock_rate
  integer(c_int64_t) :: sizes(MAXPLAN + 1), want
  logical :: blocking, is_root, pending, finalized_now, good

  ! PLAN ITERATIONS FREQ [-b]
  call get_command_argument(1, line)
  nplan = 0
  i = 1
  do while (i <= len_trim(line))
    j = index(line(i:), ',')
    if (j == 0) j = len_trim(line) - i + 2
    nplan = nplan + 1
    read (line(i:i + j - 2), *) plan(nplan)
    i = i + j
  end do
  call get_command_argument(2, arg)
  read (arg, *) iterations
  call get_command_argument(3, arg)
  read (arg, *) freq
  call get_command_argument(4, arg)
  blocking = trim(arg) == '-b'

  tag = 'synthetic.f90'
  call check(dynres_session_init(s), 'session_init')
  call check(dynres_session_rank(s, rank), 'session_rank')
  call check(dynres_session_app_pset(s, app_name), 'app_pset')
  app = from_c(app_name%name)

  ! Lst. 6.7: was this process added by a change? Then confirm it and join.
  it = 1
  call check(dynres_get_res_change(s, c_loc(self_set), me), 'get_res_change(SELF)')
  if (me%incl /= 0 .and. me%kind == DYNRES_RC_ADD .and. &
      (me%status == DYNRES_STATUS_ANNOUNCED .or. me%status == DYNRES_STATUS_PENDING)) then
    delta = from_c(me%delta%name)
    call check(dynres_confirm_res_change(s, delta//c_null_char, 30*SEC, new_name), 'confirm')
    call check(dynres_lookup(s, 'syn/join/'//delta//c_null_char, 60*SEC, value, &
                             int(size(value), c_size_t), vlen), 'lookup join')
    line = from_c(value)
    read (line, *) it
  else
    call check(dynres_fence(s, app//c_null_char, 30*SEC), 'fence')
  end if

  is_root = rank == 0
  pending = .false.
  next_item = 1
  outstanding = 0
  refused_since = -1
  nsizes = 0
  pkind = DYNRES_RC_NONE
  if (is_root) then
    call check(dynres_get_pset_info(s, app//c_null_char, info), 'pset_info')
    nsizes = 1
    sizes(1) = info%size
    print '(a)', 'iteration,nprocs,event'
  end if

  do
    call work()
    write (arg, '(a,i0)') 'syn/it/', it
    if (is_root) then
      call root_step()
      write (line, '(i0,1x,i0,1x,i0,*(1x,i0))') stop_flag, nprocs, n_out, removed(1:n_out)
      call check(dynres_publish(s, trim(arg)//c_null_char, trim(line)//c_null_char), 'publish')
      print '(i0,a,i0)', it, ',', nprocs
    else
      call check(dynres_lookup(s, trim(arg)//c_null_char, 60*SEC, value, &
                               int(size(value), c_size_t), vlen), 'lookup')
      line = from_c(value)
      read (line, *) stop_flag, nprocs, n_out, (removed(k), k=1, n_out)
      if (any(removed(1:n_out) == rank)) then
        ! Removed by the change: finalize and exit.
        call check(dynres_session_finalize(s), 'finalize')
        call release()
        stop
      end if
    end if
    if (stop_flag /= 0) exit
    it = it + 1
  end do

  ! Everyone left is here: a last fence, then the root cleans its keys up.
  call check(dynres_fence(s, app//c_null_char, 30*SEC), 'last fence')
  if (is_root) then
    do i = 1, it
      write (arg, '(a,i0)') 'syn/it/', i
      call check(dynres_unpublish(s, trim(arg)//c_null_char), 'unpublish')
    end do
    good = nsizes == nplan + 1
    want = sizes(1)
    do i = 1, nplan
      want = want + plan(i)
      if (good) good = sizes(i + 1) == want
    end do
    write (line, '(*(1x,i0))') sizes(1:nsizes)
    if (good) then
      print '(a,a,a)', 'synthetic.f90: sizes', trim(line), ' as planned'
    else
      print '(a,a,a)', 'synthetic.f90: sizes', trim(line), ' NOT as planned'
      error stop 1
    end if
  end if
  call check(dynres_session_finalize(s), 'finalize')
  call release()

contains

  ! Frees the strings (the main program's variables live until the very end).
  subroutine release()
    if (allocated(app)) deallocate (app)
    if (allocated(delta)) deallocate (delta)
  end subroutine

  ! A little work: a Monte Carlo estimate of pi.
  subroutine work()
    real :: x, y
    integer :: n, inside
    inside = 0
    do n = 1, 200000
      call random_number(x)
      call random_number(y)
      if (x*x + y*y <= 1.0) inside = inside + 1
    end do
    if (4.0*inside/200000.0 < 3.0) error stop 'pi'
  end subroutine

  ! Phase 1 (request when due, query), phase 2 (pset op), phase 3 (accept).
  subroutine root_step()
    integer(c_size_t) :: count
    finalized_now = .false.
    n_out = 0
    if (.not. pending) then
      if (mod(it, freq) == 0 .and. next_item <= nplan) then
        k = plan(next_item)
        req%kind = merge(DYNRES_RC_ADD, DYNRES_RC_SUB, k > 0)
        req%app = c_null_ptr
        req%add = max(k, 0)
        req%sub = max(-k, 0)
        req%victims = c_null_ptr
        req%nvictims = 0
        req%bound = c_null_ptr
        rc = dynres_request_res_change(s, req, result, queued)
        call system_clock(clock_now, clock_rate)
        if (rc == DYNRES_OK) then
          next_item = next_item + 1
          outstanding = outstanding + 1
          refused_since = -1
        else if (rc == DYNRES_ERR_RC_SLOTS .and. (refused_since < 0 .or. &
                                                  clock_now - refused_since < 60*clock_rate)) then
          ! Removed processes keep their slots until they have exited (SLOT-3): ask
          ! again at the next due iteration, for up to a minute.
          if (refused_since < 0) refused_since = clock_now
        else
          call check(rc, 'request_res_change')
        end if
      end if
      call check(dynres_get_res_change(s, c_null_ptr, q), 'get_res_change')
      if (q%kind /= DYNRES_RC_NONE .and. q%status == DYNRES_STATUS_ANNOUNCED) then
        delta = from_c(q%delta%name)
        call check(dynres_pset_op(s, merge(DYNRES_OP_UNION, DYNRES_OP_DIFFERENCE, &
                                           q%kind == DYNRES_RC_ADD), &
                                  app//c_null_char, delta//c_null_char, app//c_null_char, &
                                  result), 'pset_op')
        pending = .true.
        pkind = q%kind
      end if
    end if
    if (pending) then
      if (blocking) then
        call check(dynres_accept_res_change_blocking(s, delta//c_null_char, app//c_null_char, &
                                                     c_null_ptr, 30*SEC, a), 'accept')
      else
        call check(dynres_accept_res_change(s, delta//c_null_char, app//c_null_char, &
                                            c_null_ptr, a), 'accept')
      end if
      if (a%status == DYNRES_STATUS_FINALIZED) then
        call check(dynres_session_removed(s, removed, int(MAXRANKS, c_size_t), count), &
                   'removed')
        n_out = int(count)
        if (pkind == DYNRES_RC_ADD) then
          write (line, '(i0)') it + 1
          call check(dynres_publish(s, 'syn/join/'//delta//c_null_char, &
                                    trim(line)//c_null_char), 'publish join')
        end if
        call check(dynres_get_pset_info(s, app//c_null_char, info), 'pset_info')
        nsizes = nsizes + 1
        sizes(nsizes) = info%size
        pending = .false.
        outstanding = outstanding - 1
        finalized_now = .true.
      else if (a%status /= DYNRES_STATUS_PENDING) then
        error stop 'change neither pending nor finalized'
      end if
    end if
    call check(dynres_get_pset_info(s, app//c_null_char, info), 'pset_info')
    nprocs = int(info%size)
    stop_flag = 0
    if (it >= iterations .and. next_item > nplan .and. outstanding == 0 .and. &
        .not. pending .and. .not. finalized_now) stop_flag = 1
  end subroutine
end program
