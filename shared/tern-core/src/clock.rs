//! A monotonic clock that caches read their time from, so a test can move an hour ahead
//! without sleeping ([`ManualClock`]); processes use [`SystemClock`].

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where a cache reads the time (monotonic: never goes back).
pub trait MonotonicClock: Send + Sync + std::fmt::Debug {
    /// Now.
    fn now(&self) -> Instant;
}

/// The process's own clock ([`Instant::now`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl MonotonicClock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told ([`Self::advance`]): for tests of time-based caches.
/// It starts at the real time it was made.
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    offset: Mutex<Duration>,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        }
    }
}

impl ManualClock {
    /// Moves the clock `by` ahead.
    pub fn advance(&self, by: Duration) {
        let mut offset = self
            .offset
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *offset += by;
    }
}

impl MonotonicClock for ManualClock {
    fn now(&self) -> Instant {
        let offset = *self
            .offset
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.start + offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::default();
        let a = clock.now();
        assert_eq!(clock.now(), a);
        clock.advance(Duration::from_secs(3_600));
        assert_eq!(clock.now() - a, Duration::from_secs(3_600));
    }
}
