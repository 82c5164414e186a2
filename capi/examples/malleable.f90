! malleable.f90: the guide's malleable loop (docs/guide.md) in Fortran, over dynres'
! client library through ISO_C_BINDING (module dynres, dynres.f90). The same program as
! malleable.c (see its header for how the root tells the others what happened):
!
!   dynres run -n 2 --max 8 -- ./malleable_f STOPFILE
!
! It takes whatever change `dynres grow/shrink/replace JOB ...` asks for between two
! iterations and stops, every process at the same iteration, once STOPFILE exists and
! no change is in flight. Rank 0 prints "malleable: ADD finalized, size 4" per change.

program malleable_f
  use dynres
  implicit none
  integer, parameter :: MAXRANKS = 1024
  type(c_ptr) :: s
  integer(c_int32_t) :: rank, removed(MAXRANKS)
  integer(c_size_t) :: vlen, nremoved
  type(dynres_pset_name) :: app_name, result, new_name
  type(dynres_res_change) :: me, q
  type(dynres_accept_result) :: a
  type(dynres_pset_info) :: info
  character(kind=c_char), target :: self_set(11) = [character(kind=c_char) :: &
                                                    'm', 'p', 'i', ':', '/', '/', 'S', 'E', 'L', 'F', c_null_char]
  character(kind=c_char) :: value(DYNRES_VALUE_MAX + 1)
  character(len=:), allocatable :: app, delta, gone
  character(len=4096) :: stopfile
  character(len=DYNRES_VALUE_MAX) :: line
  character(len=64) :: key
  integer :: it, i, stop_flag, n_out, pkind
  logical :: is_root, pending, busy, there, left
  interface
    integer(c_int) function usleep(us) bind(c) ! POSIX: the work of one iteration
      import :: c_int, c_int32_t
      integer(c_int32_t), value :: us
    end function
  end interface

  call get_command_argument(1, stopfile)
  tag = 'malleable.f90'
  call check(dynres_session_init(s), 'session_init')
  call check(dynres_session_rank(s, rank), 'session_rank')
  call check(dynres_session_app_pset(s, app_name), 'app_pset')
  app = from_c(app_name%name)

  ! Was this process added by a change (ADD or REPLACE)? Then confirm it and join.
  it = 1
  call check(dynres_get_res_change(s, c_loc(self_set), me), 'get_res_change(SELF)')
  if (me%incl /= 0 .and. (me%kind == DYNRES_RC_ADD .or. me%kind == DYNRES_RC_REPLACE) .and. &
      (me%status == DYNRES_STATUS_ANNOUNCED .or. me%status == DYNRES_STATUS_PENDING)) then
    delta = from_c(me%delta%name)
    call check(dynres_confirm_res_change(s, delta//c_null_char, 30*SEC, new_name), 'confirm')
    call check(dynres_lookup(s, 'mal/join/'//delta//c_null_char, 60*SEC, value, &
                             int(size(value), c_size_t), vlen), 'lookup join')
    line = from_c(value)
    read (line, *) it
  end if
  ! Rank 0 stays the root: a shrink or replace without named victims takes the
  ! processes on the highest occupied slots (RC-5).
  is_root = rank == 0
  pending = .false.
  pkind = DYNRES_RC_NONE

  do
    if (usleep(50000_c_int32_t) /= 0) continue ! the work of one iteration
    write (key, '(a,i0)') 'mal/', it
    nremoved = 0
    if (is_root) then
      busy = pending
      if (.not. pending) then ! phase 1: query
        call check(dynres_get_res_change(s, c_null_ptr, q), 'get_res_change')
        if (q%kind /= DYNRES_RC_NONE .and. q%status == DYNRES_STATUS_ANNOUNCED) then
          delta = from_c(q%delta%name)
          ! Phase 2: app minus the removed processes, then plus the added ones.
          if (q%kind == DYNRES_RC_SUB) then
            call check(dynres_pset_op(s, DYNRES_OP_DIFFERENCE, app//c_null_char, &
                                      delta//c_null_char, app//c_null_char, result), 'pset_op')
          else if (q%kind == DYNRES_RC_REPLACE) then
            gone = from_c(q%sub_delta%name)
            call check(dynres_pset_op(s, DYNRES_OP_DIFFERENCE, app//c_null_char, &
                                      gone//c_null_char, app//c_null_char, result), 'pset_op')
          end if
          if (q%kind == DYNRES_RC_ADD .or. q%kind == DYNRES_RC_REPLACE) then
            call check(dynres_pset_op(s, DYNRES_OP_UNION, app//c_null_char, &
                                      delta//c_null_char, app//c_null_char, result), 'pset_op')
          end if
          pending = .true.
          busy = .true.
          pkind = q%kind
        end if
      end if
      if (pending) then ! phase 3: accept until decided
        call check(dynres_accept_res_change_blocking(s, delta//c_null_char, app//c_null_char, &
                                                     c_null_ptr, 30*SEC, a), 'accept')
        if (a%status == DYNRES_STATUS_FINALIZED) then
          call check(dynres_session_removed(s, removed, int(MAXRANKS, c_size_t), nremoved), &
                     'session_removed')
          if (pkind /= DYNRES_RC_SUB) then
            write (line, '(i0)') it + 1
            call check(dynres_publish(s, 'mal/join/'//delta//c_null_char, &
                                      trim(line)//c_null_char), 'publish join')
          end if
          call check(dynres_get_pset_info(s, app//c_null_char, info), 'pset_info')
          if (pkind == DYNRES_RC_ADD) then
            write (*, '(a,i0)') 'malleable: ADD finalized, size ', info%size
          else if (pkind == DYNRES_RC_SUB) then
            write (*, '(a,i0)') 'malleable: SUB finalized, size ', info%size
          else
            write (*, '(a,i0)') 'malleable: REPLACE finalized, size ', info%size
          end if
          flush (6)
          pending = .false.
        end if
      end if
      inquire (file=trim(stopfile), exist=there)
      stop_flag = merge(1, 0, .not. busy .and. there)
      write (line, '(i0,1x,i0,*(1x,i0))') stop_flag, nremoved, removed(1:nremoved)
      call check(dynres_publish(s, trim(key)//c_null_char, trim(line)//c_null_char), 'publish')
    else
      call check(dynres_lookup(s, trim(key)//c_null_char, 60*SEC, value, &
                               int(size(value), c_size_t), vlen), 'lookup')
      line = from_c(value)
      read (line, *) stop_flag, n_out
      read (line, *) stop_flag, n_out, (removed(i), i=1, n_out)
      nremoved = n_out
    end if
    ! Removed by the change: finalize and exit.
    left = any(removed(1:nremoved) == rank)
    if (left .or. stop_flag == 1) exit
    it = it + 1
  end do
  if (.not. left) then
    call check(dynres_fence(s, app//c_null_char, 30*SEC), 'fence')
    if (is_root) write (*, '(a,i0)') 'malleable: stopped at iteration ', it
  end if
  call check(dynres_session_finalize(s), 'finalize')
  ! LeakSanitizer counts the allocatable strings still alive at exit.
  if (allocated(app)) deallocate (app)
  if (allocated(delta)) deallocate (delta)
  if (allocated(gone)) deallocate (gone)
end program
