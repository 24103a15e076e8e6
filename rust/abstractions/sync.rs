// SPDX-License-Identifier: GPL-2.0

//! A spinlock that also disables bottom halves (`spin_lock_bh`): for data that
//! process context, timers and the softirq receive path all touch; and one
//! that disables interrupts (`spin_lock_irqsave`): for the little that a
//! kernel consumer reaches with interrupts disabled (the MAD layer posts to
//! QP1 under its own `spin_lock_irqsave`, where `spin_unlock_bh` must not
//! run). And an RCU read-side critical section with bottom halves disabled
//! (`rcu_read_lock_bh`), for a reader that takes no lock at all.
//!
//! C headers: [`include/linux/spinlock.h`](srctree/include/linux/spinlock.h),
//! [`include/linux/rcupdate.h`](srctree/include/linux/rcupdate.h)

use super::bindings;
use core::marker::PhantomData;
use kernel::sync::lock::{Backend, Lock};

/// A spinlock taken with bottom halves disabled. Create one with
/// [`new_spinlock_bh!`](crate::new_spinlock_bh).
pub(crate) type SpinLockBh<T> = Lock<T, SpinLockBhBackend>;

/// Creates a [`SpinLockBh`] initialiser with a lock class of its own.
#[macro_export]
macro_rules! new_spinlock_bh {
    ($inner:expr, $name:literal $(,)?) => {
        kernel::sync::lock::Lock::<_, $crate::abstractions::sync::SpinLockBhBackend>::new(
            $inner,
            kernel::c_str!($name),
            kernel::static_lock_class!(),
        )
    };
}

/// The `spin_lock_bh` backend of [`SpinLockBh`].
pub(crate) struct SpinLockBhBackend;

fn raw(ptr: *mut kernel::bindings::spinlock_t) -> *mut bindings::spinlock_t {
    // CAST: the kernel crate's and these bindings' `spinlock_t` are the same C type.
    ptr.cast()
}

// SAFETY: `lock` and `unlock` are `spin_lock_bh` / `spin_unlock_bh` on the same
// `spinlock_t`, which gives mutual exclusion; the guard state is empty.
unsafe impl Backend for SpinLockBhBackend {
    type State = kernel::bindings::spinlock_t;
    type GuardState = ();

    unsafe fn init(
        ptr: *mut Self::State,
        name: *const kernel::ffi::c_char,
        key: *mut kernel::bindings::lock_class_key,
    ) {
        // SAFETY: Per the trait's requirements `ptr` is valid for writes and
        // `name` and `key` live forever.
        unsafe { kernel::bindings::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: The lock was initialised (trait requirement).
        unsafe { bindings::mr_spin_lock_bh(raw(ptr)) }
    }

    unsafe fn unlock(ptr: *mut Self::State, _guard_state: &Self::GuardState) {
        // SAFETY: The caller owns the lock (trait requirement).
        unsafe { bindings::mr_spin_unlock_bh(raw(ptr)) }
    }

    unsafe fn try_lock(ptr: *mut Self::State) -> Option<Self::GuardState> {
        // SAFETY: The lock was initialised (trait requirement).
        (unsafe { bindings::mr_spin_trylock_bh(raw(ptr)) } != 0).then_some(())
    }

    unsafe fn assert_is_held(ptr: *mut Self::State) {
        // SAFETY: The lock was initialised (trait requirement).
        unsafe { kernel::bindings::spin_assert_is_held(ptr) }
    }
}

/// A spinlock taken with interrupts disabled (and their state restored on
/// release). Create one with [`new_spinlock_irq!`](crate::new_spinlock_irq).
pub(crate) type SpinLockIrq<T> = Lock<T, SpinLockIrqBackend>;

/// Creates a [`SpinLockIrq`] initialiser with a lock class of its own.
#[macro_export]
macro_rules! new_spinlock_irq {
    ($inner:expr, $name:literal $(,)?) => {
        kernel::sync::lock::Lock::<_, $crate::abstractions::sync::SpinLockIrqBackend>::new(
            $inner,
            kernel::c_str!($name),
            kernel::static_lock_class!(),
        )
    };
}

/// The `spin_lock_irqsave` backend of [`SpinLockIrq`].
pub(crate) struct SpinLockIrqBackend;

// SAFETY: `lock` and `unlock` are `spin_lock_irqsave` /
// `spin_unlock_irqrestore` on the same `spinlock_t`, which gives mutual
// exclusion; the guard state is the saved interrupt state, given back to the
// unlock of the same acquisition.
unsafe impl Backend for SpinLockIrqBackend {
    type State = kernel::bindings::spinlock_t;
    type GuardState = kernel::ffi::c_ulong;

    unsafe fn init(
        ptr: *mut Self::State,
        name: *const kernel::ffi::c_char,
        key: *mut kernel::bindings::lock_class_key,
    ) {
        // SAFETY: Per the trait's requirements `ptr` is valid for writes and
        // `name` and `key` live forever.
        unsafe { kernel::bindings::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: The lock was initialised (trait requirement).
        unsafe { bindings::mr_spin_lock_irqsave(raw(ptr)) }
    }

    unsafe fn unlock(ptr: *mut Self::State, guard_state: &Self::GuardState) {
        // SAFETY: The caller owns the lock (trait requirement), taken by
        // `lock`, which returned `guard_state`.
        unsafe { bindings::mr_spin_unlock_irqrestore(raw(ptr), *guard_state) }
    }

    unsafe fn try_lock(ptr: *mut Self::State) -> Option<Self::GuardState> {
        let mut flags = 0;
        // SAFETY: The lock was initialised (trait requirement); `flags` is
        // valid for the write.
        (unsafe { bindings::mr_spin_trylock_irqsave(raw(ptr), &mut flags) } != 0).then_some(flags)
    }

    unsafe fn assert_is_held(ptr: *mut Self::State) {
        // SAFETY: The lock was initialised (trait requirement).
        unsafe { kernel::bindings::spin_assert_is_held(ptr) }
    }
}

/// An RCU read-side critical section with bottom halves disabled
/// (`rcu_read_lock_bh`), from [`RcuBh::new`] until the guard is dropped.
/// `synchronize_rcu` waits for every such section that began before it
/// (since Linux 5.0 a region with bottom halves disabled is one for it). Not
/// to be begun with interrupts disabled (like a [`SpinLockBh`]: its end
/// enables bottom halves).
///
/// # Invariants
///
/// While the guard exists, the thread that created it is in the section
/// (the guard is not `Send`: the section ends where it began).
pub(crate) struct RcuBh(PhantomData<*mut ()>);

impl RcuBh {
    /// Begins the section.
    pub(crate) fn new() -> Self {
        // SAFETY: Beginning a section has no precondition (it nests, and
        // bottom halves may already be disabled); `drop` ends it.
        unsafe { bindings::mr_rcu_read_lock_bh() };
        // INVARIANT: The section began just above, on this thread.
        Self(PhantomData)
    }
}

impl Drop for RcuBh {
    fn drop(&mut self) {
        // SAFETY: This thread is in the section `new` began (type invariant),
        // and this ends it once: the guard is dropped once.
        unsafe { bindings::mr_rcu_read_unlock_bh() };
    }
}
