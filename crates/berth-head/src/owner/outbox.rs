//! The assignments (starts, stops) that commits send to the agents, sent at most once per
//! window.
//!
//! Every assignment is durable before it is queued here; what this adds is when it leaves.
//! When the head is quiet an assignment leaves as soon as its commit does, and so do the first
//! [`AT_ONCE`] of a window: a driver waiting on one task at a time (a start, then a stop or a
//! release per task) never waits for a window. Beyond that, under load, the commits'
//! assignments are held until the window has passed, and then go out together: the agents' streams (and the agents) wake once for many starts instead of
//! once per commit, and a node that is sent several gets them in one write. In `berth bench
//! api`'s single creations (a commit every ~1 ms, ~15 starts each over 100 nodes) a 10 ms
//! window took the machine's CPU per creation from 113–130 µs to 78–114 µs in three
//! order-swapped pairs (the agents' share from 16–18 to 6–10 µs), at the cost of starts waiting
//! up to the window under load. The 201 of a creation does not wait for its start, so it is not
//! delayed.

use std::time::Duration;

use berth_api::agent::Assignment;
use tokio::time::Instant;

use crate::command::AssignmentSender;

/// How many assignments a window sends as they come; the rest of the window's wait for its end.
/// A sequential task loop makes about 6 per 10 ms window; `berth bench api`'s single creations
/// about 150.
pub(crate) const AT_ONCE: usize = 8;

/// Assignments held for their window, in the order their commits made them.
pub(crate) struct Outbox {
    window: Duration,
    held: Vec<(AssignmentSender, Box<Assignment>)>,
    /// When the current window began: the first send after a quiet spell opens one.
    opened: Instant,
    /// When it ends (at first, when the outbox was made: already past, so no window is open).
    closes: Instant,
    /// Assignments sent in the current window.
    sent: usize,
}

impl Outbox {
    /// An outbox that sends at most [`AT_ONCE`] assignments one by one per `window`, then the
    /// rest together when it ends (zero: each assignment at once).
    pub(crate) fn new(window: Duration) -> Outbox {
        let now = Instant::now();
        Outbox { window, held: Vec::new(), opened: now, closes: now, sent: 0 }
    }

    /// Holds an assignment until [`Outbox::send_due`] sends it.
    pub(crate) fn hold(&mut self, to: AssignmentSender, assignment: Box<Assignment>) {
        self.held.push((to, assignment));
    }

    /// When held assignments are due (`None` when nothing is held): at once (the window's
    /// start, in the past) while the window's budget lasts, else when the window ends, which is
    /// in the past when the head has been quiet. (It never reads the clock: a `now` read here
    /// would always be later than the caller's.)
    pub(crate) fn due(&self) -> Option<Instant> {
        if self.held.is_empty() {
            None
        } else if self.sent < AT_ONCE {
            Some(self.opened)
        } else {
            Some(self.closes)
        }
    }

    /// Sends what is due at `now`: everything once the window has ended (or none is open),
    /// else what is left of the window's budget, oldest first.
    pub(crate) fn send_due(&mut self, now: Instant) {
        if self.held.is_empty() {
            return;
        }
        if now >= self.closes {
            self.send_all(now);
        } else if self.sent < AT_ONCE {
            let budget = (AT_ONCE - self.sent).min(self.held.len());
            self.send_first(budget);
        }
    }

    /// Sends everything held, due or not (the committer is stopping).
    pub(crate) fn send_all(&mut self, now: Instant) {
        if self.held.is_empty() {
            return;
        }
        if now >= self.closes {
            self.opened = now;
            self.closes = now + self.window;
            self.sent = 0;
        }
        self.send_first(self.held.len());
    }

    fn send_first(&mut self, count: usize) {
        self.sent += count;
        for (to, assignment) in self.held.drain(..count) {
            // A closed stream is an agent that is gone; it gets its work again when it
            // registers and opens a new one.
            let _ = to.send(Ok(*assignment));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_api::agent::{assignment, Start};
    use tokio::sync::mpsc;

    fn start(work_id: &str) -> Box<Assignment> {
        let start = Start { work_id: work_id.into(), ..Default::default() };
        Box::new(Assignment { kind: Some(assignment::Kind::Start(start)) })
    }

    fn received(
        rx: &mut mpsc::UnboundedReceiver<Result<Assignment, tonic::Status>>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(Ok(Assignment { kind: Some(assignment::Kind::Start(s)) })) = rx.try_recv() {
            out.push(s.work_id);
        }
        out
    }

    const WINDOW: Duration = Duration::from_millis(5);

    #[tokio::test(start_paused = true)]
    async fn a_quiet_head_sends_at_once_and_a_busy_one_once_per_window_in_order() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut outbox = Outbox::new(WINDOW);
        assert_eq!(outbox.due(), None);
        // Quiet: nothing sent before, so the first is due now, and opens a window.
        outbox.hold(tx.clone(), start("actor-0"));
        let opened = Instant::now();
        outbox.send_due(opened);
        assert_eq!(received(&mut rx), ["actor-0"]);
        // The window's first AT_ONCE leave as they come (one a commit, as a task loop makes).
        for i in 1..AT_ONCE {
            tokio::time::advance(Duration::from_micros(100)).await;
            outbox.hold(tx.clone(), start(&format!("actor-{i}")));
            outbox.send_due(Instant::now());
            assert_eq!(received(&mut rx), [format!("actor-{i}")]);
        }
        // Busy: the next commits' assignments wait for the window's end, then leave together.
        assert_eq!(outbox.due(), None);
        tokio::time::advance(Duration::from_millis(1)).await;
        outbox.hold(tx.clone(), start("late-1"));
        outbox.send_due(Instant::now());
        tokio::time::advance(Duration::from_millis(2)).await;
        outbox.hold(tx.clone(), start("late-2"));
        outbox.send_due(Instant::now());
        assert_eq!(received(&mut rx), Vec::<String>::new());
        let due = outbox.due().unwrap();
        assert_eq!(due, opened + WINDOW, "when the window that the first send opened ends");
        tokio::time::sleep_until(due).await;
        outbox.send_due(Instant::now());
        assert_eq!(received(&mut rx), ["late-1", "late-2"]);
        assert_eq!(outbox.due(), None);
        // A commit of many at once on a quiet head leaves at once too.
        tokio::time::advance(WINDOW).await;
        for i in 0..AT_ONCE + 2 {
            outbox.hold(tx.clone(), start(&format!("burst-{i}")));
        }
        outbox.send_due(Instant::now());
        assert_eq!(received(&mut rx).len(), AT_ONCE + 2);
        // ...and fills its window: the next waits for the window's end.
        outbox.hold(tx.clone(), start("after-burst"));
        outbox.send_due(Instant::now());
        assert_eq!(received(&mut rx), Vec::<String>::new());
        tokio::time::advance(WINDOW).await;
        outbox.send_due(Instant::now());
        assert_eq!(received(&mut rx), ["after-burst"]);
        // A commit that straddles the budget: what fits leaves now, the rest at the window's end.
        tokio::time::advance(WINDOW).await;
        let opened = Instant::now();
        for i in 0..3 {
            outbox.hold(tx.clone(), start(&format!("first-{i}")));
        }
        outbox.send_due(opened);
        assert_eq!(received(&mut rx).len(), 3);
        for i in 0..AT_ONCE {
            outbox.hold(tx.clone(), start(&format!("straddle-{i}")));
        }
        outbox.send_due(Instant::now());
        let sent = received(&mut rx);
        assert_eq!(sent.len(), AT_ONCE - 3);
        assert_eq!(sent[0], "straddle-0", "oldest first");
        assert_eq!(outbox.due(), Some(opened + WINDOW));
        tokio::time::advance(WINDOW).await;
        outbox.send_due(Instant::now());
        assert_eq!(received(&mut rx), ["straddle-5", "straddle-6", "straddle-7"]);
    }

    /// On the real clock: an outbox that never sent is due before any `now` a caller reads.
    #[tokio::test]
    async fn a_new_outbox_sends_the_first_assignment_at_once_on_the_real_clock() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut outbox = Outbox::new(WINDOW);
        outbox.hold(tx, start("actor-1"));
        outbox.send_due(Instant::now());
        assert_eq!(received(&mut rx), ["actor-1"]);
        assert_eq!(outbox.due(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_window_sends_each_at_once_and_send_all_empties_it() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut outbox = Outbox::new(Duration::ZERO);
        for id in ["task-1", "task-2"] {
            outbox.hold(tx.clone(), start(id));
            outbox.send_due(Instant::now());
        }
        assert_eq!(received(&mut rx), ["task-1", "task-2"]);
        let mut outbox = Outbox::new(WINDOW);
        outbox.send_all(Instant::now());
        outbox.hold(tx.clone(), start("task-3"));
        outbox.send_all(Instant::now());
        outbox.hold(tx, start("task-4"));
        outbox.send_all(Instant::now());
        assert_eq!(received(&mut rx), ["task-3", "task-4"]);
        // A stream whose agent is gone is skipped without an error.
        let (gone, dropped) = mpsc::unbounded_channel();
        drop(dropped);
        outbox.hold(gone, start("task-5"));
        outbox.send_all(Instant::now());
        assert_eq!(outbox.due(), None);
    }
}
