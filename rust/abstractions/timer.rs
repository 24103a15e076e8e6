// SPDX-License-Identifier: GPL-2.0

//! The data path's clock, and a high-resolution timer that fires in softirq
//! context with a work item that runs its handler on a worker thread.
//!
//! C headers: [`include/linux/hrtimer.h`](srctree/include/linux/hrtimer.h),
//! [`include/linux/workqueue.h`](srctree/include/linux/workqueue.h)

use super::bindings;
use core::marker::PhantomData;
use kernel::{
    prelude::*,
    sync::{Arc, ArcBorrow},
    types::Opaque,
};

/// The clock of the data path, in nanoseconds (monotonic).
pub(crate) fn now_ns() -> u64 {
    // SAFETY: Reads the clock.
    unsafe { bindings::mr_ktime_get_ns() }
}

/// What runs when a [`Timer`] expires or is kicked.
pub(crate) trait TimerHandler: Send + Sync + 'static {
    /// `timer` expired, in softirq context (it may be started again or
    /// kicked from here).
    fn expired(timer: &Timer<Self>)
    where
        Self: Sized;

    /// `timer` was kicked ([`Timer::kick`]): runs on a worker thread, in
    /// process context (it may be started again or kicked from here).
    fn kicked(timer: &Timer<Self>)
    where
        Self: Sized;
}

/// A high-resolution timer with data `T` (`struct hrtimer`, soft mode), and
/// a work item that runs a handler on a worker thread of the kernel's
/// default unbound workqueue ([`Timer::kick`]).
///
/// # Invariants
///
/// Every `Timer` lives in an [`Arc`] ([`Timer::new_arc`] is the only way to
/// make one). `timer` was set up with `Self::expired` as its function; it is
/// cancelled before the memory goes away. `work` was set up with
/// `Self::worked`; while it is pending it owns one reference of that `Arc`
/// (taken by `kick`, given back by `worked` or `stop`), so the memory cannot
/// go away under it.
#[pin_data(PinnedDrop)]
#[repr(C)]
pub(crate) struct Timer<T: TimerHandler> {
    #[pin]
    timer: Opaque<bindings::hrtimer>,
    #[pin]
    work: Opaque<bindings::work_struct>,
    data: T,
    _p: PhantomData<T>,
}

// SAFETY: The hrtimer is only touched through the kernel's thread-safe timer
// calls; `T` is `Send + Sync`.
unsafe impl<T: TimerHandler> Send for Timer<T> {}
// SAFETY: As above.
unsafe impl<T: TimerHandler> Sync for Timer<T> {}

impl<T: TimerHandler> core::ops::Deref for Timer<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

impl<T: TimerHandler> Timer<T> {
    /// A stopped timer around `data`, in a new [`Arc`].
    pub(crate) fn new_arc(data: T, flags: kernel::alloc::Flags) -> Result<Arc<Self>> {
        Arc::pin_init(Self::init(data), flags)
    }

    fn init(data: T) -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: `slot` is valid for the call; the timer is set up in place
            // and never moves (pinned).
            timer <- Opaque::ffi_init(|slot: *mut bindings::hrtimer| unsafe {
                bindings::hrtimer_setup(
                    slot,
                    Some(Self::expired),
                    bindings::CLOCK_MONOTONIC as bindings::clockid_t,
                    bindings::hrtimer_mode_HRTIMER_MODE_REL_SOFT,
                )
            }),
            // SAFETY: As above, for the work item.
            work <- Opaque::ffi_init(|slot: *mut bindings::work_struct| unsafe {
                bindings::mr_init_work(slot, Some(Self::worked))
            }),
            data,
            _p: PhantomData,
        })
    }

    /// Runs [`TimerHandler::kicked`] soon on a worker thread (process
    /// context, on a CPU the scheduler finds free), unless that is already
    /// pending. Callable from any context. A system call that posts work
    /// returns at once; what the handler sends (and the softirqs it causes on
    /// a veth or loopback path) runs beside the caller, not in its time.
    pub(crate) fn kick(&self) {
        // SAFETY: `self` is inside an `Arc` (type invariant), whose count the
        // reference `&self` keeps above zero for this call.
        let this: Arc<Self> = unsafe { ArcBorrow::from_raw(self) }.into();
        let raw = Arc::into_raw(this);
        // SAFETY: The work item was set up (type invariant). When it was not
        // pending it now is, and owns the reference leaked above.
        let queued = unsafe { bindings::mr_queue_work_dfl(self.work.get()) };
        if !queued {
            // Already pending with a reference of its own: give ours back.
            // SAFETY: `raw` came from `into_raw` just above and went nowhere.
            drop(unsafe { Arc::from_raw(raw) });
        }
    }

    /// Stops both the timer and the work item, waiting for a running
    /// handler to finish. Must not be called from the handler. The handler
    /// may be kicked again afterwards (it must then find nothing to do).
    pub(crate) fn stop(&self) {
        // SAFETY: The work item was set up; the call may sleep (process
        // context is the caller's requirement).
        if unsafe { bindings::mr_cancel_work_sync(self.work.get()) } {
            // It was pending: the reference it owned is ours to drop.
            // SAFETY: `kick` leaked exactly this reference for the pending
            // run, which will not happen now.
            drop(unsafe { Arc::from_raw(self) });
        }
        self.cancel();
    }

    /// # Safety
    ///
    /// Only as the function of this timer's work item, for a run `kick` queued.
    unsafe extern "C" fn worked(w: *mut bindings::work_struct) {
        let off = core::mem::offset_of!(Self, work);
        // SAFETY: `w` is the `work` field of a `Self` inside an `Arc`, whose
        // reference `kick` leaked for this run (type invariant): it is ours
        // now, and dropping it at the end may free `Self`, which is fine
        // since the work item is no longer used by the workqueue.
        let this = unsafe { Arc::from_raw(w.cast::<u8>().sub(off).cast::<Self>()) };
        T::kicked(&this);
    }

    /// (Re)arms the timer to fire in `ns` nanoseconds.
    pub(crate) fn start(&self, ns: u64) {
        // SAFETY: The timer was set up (type invariant).
        unsafe { bindings::mr_hrtimer_start_ns(self.timer.get(), ns) }
    }

    /// Stops the timer, waiting for a running expiry to finish. Must not be
    /// called from the timer's own function.
    pub(crate) fn cancel(&self) {
        // SAFETY: The timer was set up.
        unsafe { bindings::hrtimer_cancel(self.timer.get()) };
    }

    /// # Safety
    ///
    /// Only as the function of this timer's `hrtimer`.
    unsafe extern "C" fn expired(t: *mut bindings::hrtimer) -> bindings::hrtimer_restart {
        // CAST: `timer` is the first field of the `repr(C)` `Self`.
        // SAFETY: The timer is cancelled before the memory is freed, which
        // waits for this function to return.
        let this = unsafe { &*t.cast::<Self>() };
        T::expired(this);
        bindings::hrtimer_restart_HRTIMER_NORESTART
    }
}

#[pinned_drop]
impl<T: TimerHandler> PinnedDrop for Timer<T> {
    fn drop(self: Pin<&mut Self>) {
        self.cancel();
    }
}
