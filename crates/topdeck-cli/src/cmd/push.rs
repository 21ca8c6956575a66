// SPDX-License-Identifier: Apache-2.0
//! `topdeck push`: every registry and porthole `serve` would export, sent
//! to an OpenTelemetry receiver (a collector, or anything that takes
//! OTLP/HTTP protobuf at `/v1/metrics`) every interval, or once.
//!
//! The series are read as `serve` reads them (the same scraper, namespace
//! and portholes, [`crate::sources`]) and mapped to OTLP by
//! `topdeck_export::otlp` (cumulative sums and histograms that start when
//! their registry was created). Where and how to send follows the
//! OpenTelemetry exporter variables ([`config`]). Each interval's batch is
//! one request, or several of at most [`MAX_REQUEST_BYTES`] for a host
//! with many series. A request the receiver
//! cannot take now waits in a bounded queue ([`queue`]) and is retried
//! with backoff, after `Retry-After` when the receiver gives one ([`send`]);
//! what the queue cannot hold is dropped, oldest first, counted in the
//! push's own metrics ([`own`]) and logged. SIGTERM, SIGINT and SIGHUP
//! end it between two batches, as the signal would (what was still
//! queued is logged).

pub mod config;
mod own;
pub mod queue;
mod send;

use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use topdeck_export::otlp::{Encoder, Own};
use topdeck_export::Scraper;

use crate::sources::SkipLog;
use config::{Compression, Config};
use own::*;
use queue::{Backoff, Outage, Pending, Queue};
use send::{Outcome, Sender};

/// Default bound of the queue, in bytes of requests.
pub const MAX_QUEUE_BYTES: usize = 64 << 20;
/// Most bytes of one request (before compression) when the series can be
/// split (whole resources each): well under receivers' usual caps (a
/// collector's otlp receiver takes 20 MiB by default).
pub const MAX_REQUEST_BYTES: usize = 4 << 20;
/// `service.name` of the push's own metrics.
const SERVICE: &str = "topdeck-push";

/// What `topdeck push` was asked to do.
#[derive(Debug)]
pub struct Options {
    /// Every user's registries (root only), not only the caller's.
    pub all_users: bool,
    /// Other runtimes' portholes to push beside the registries.
    pub portholes: Option<topdeck_sources::Portholes>,
    /// Time between batches.
    pub interval: Duration,
    /// One batch, then exit (failing if it was not delivered).
    pub once: bool,
    /// Requests the queue holds at most.
    pub queue: usize,
    /// Where and how to send.
    pub config: Config,
    /// Who and how much is pushed.
    pub policy: topdeck_export::Policy,
}

/// Pushes until SIGTERM, SIGINT or SIGHUP, or once.
pub fn run(out: &mut impl Write, options: Options) -> Result<()> {
    let namespace = crate::sources::namespace(options.all_users, "push")?;
    let dirs = namespace.describe();
    let mut pusher = Pusher {
        scraper: topdeck_export::Scraper::of(namespace, options.portholes)
            .with_policy(options.policy),
        encoder: Encoder::new(hostname()),
        sender: Sender::new(options.config.clone()),
        compression: options.config.compression,
        own: own::metrics(),
        queue: Queue::new(options.queue, MAX_QUEUE_BYTES),
        backoff: Backoff::default(),
        skips: SkipLog::new("push"),
        started_unix_ns: unix_ns(SystemTime::now()),
        interval: options.interval,
        last_refusal: String::new(),
        outage: None,
    };
    if options.once {
        return pusher.once(out);
    }
    let stop = crate::stop::install().context("cannot handle the stop signals")?;
    eprintln!(
        "topdeck push: reading registries in {dirs}; pushing to {} every {}",
        pusher.sender.url(),
        humantime::format_duration(options.interval)
    );
    let start = Instant::now();
    let mut ticks: u32 = 0;
    loop {
        pusher.tick()?;
        if stop.is_requested() {
            break;
        }
        // Ticks at fixed times from the start; a push that overran skips
        // the ticks it missed rather than bunching them up.
        let now = Instant::now();
        let elapsed = now.duration_since(start);
        ticks = ticks.max((elapsed.as_nanos() / options.interval.as_nanos().max(1)) as u32) + 1;
        let next = start + options.interval.saturating_mul(ticks);
        if stop.wait_timeout(next.saturating_duration_since(now)) {
            break;
        }
    }
    if !pusher.queue.is_empty() {
        eprintln!(
            "topdeck push: stopped with {} requests not delivered to {}{}",
            pusher.queue.len(),
            pusher.sender.url(),
            pusher.outage.as_ref().map_or(String::new(), |o| format!(
                "; its outage {}",
                o.summary(Instant::now(), pusher.backoff.failures())
            ))
        );
    }
    Ok(())
}

/// The state of a push from one batch to the next.
struct Pusher {
    scraper: Scraper,
    encoder: Encoder,
    sender: Sender,
    compression: Compression,
    own: topdeck_export::OwnMetrics,
    queue: Queue,
    backoff: Backoff,
    skips: SkipLog,
    started_unix_ns: u64,
    interval: Duration,
    /// The last refusal logged, so a receiver that refuses every batch
    /// for one reason is logged once.
    last_refusal: String,
    /// While requests cannot be delivered: since when, and drops so far.
    outage: Option<Outage>,
}

impl Pusher {
    /// Reads every registry and porthole and encodes them as requests of
    /// at most [`MAX_REQUEST_BYTES`] (before compression) where a single
    /// resource does not exceed it. Also returns the registries read.
    fn batch(&mut self) -> Result<(Vec<Pending>, usize)> {
        let gathered = self.scraper.gather();
        self.skips.log(&gathered.report.notices());
        self.own.add(BATCHES, None, 1);
        self.own.set(QUEUED, self.queue.len());
        // Its own, and what the scraper says of what it read (as `serve`
        // exports it), as they stand before this batch's clashes count.
        let mut all = self.own.clone();
        all.extend(self.scraper.read_metrics());
        let own = Own {
            service: SERVICE,
            start_unix_ns: self.started_unix_ns,
            metrics: all.metrics(),
        };
        let now = unix_ns(SystemTime::now());
        let batch = self.encoder.request(&gathered, &[own], now);
        // Counted for the next batch, as a scrape counts them.
        self.scraper.count_conflicts(batch.conflicts);
        let mut parts = Vec::new();
        self.encoder
            .encode_parts(batch, MAX_REQUEST_BYTES, |body, points| {
                parts.push((body, points))
            });
        let parts = parts
            .into_iter()
            .map(|(body, points)| {
                let body = match self.compression {
                    Compression::None => body,
                    Compression::Gzip => gzip(&body).context("cannot compress a request")?,
                };
                Ok(Pending { body, points })
            })
            .collect::<Result<_>>()?;
        Ok((parts, gathered.report.registries))
    }

    /// `--once`: one batch, one attempt per request.
    fn once(&mut self, out: &mut impl Write) -> Result<()> {
        let (parts, registries) = self.batch()?;
        let (mut points, mut bytes) = (0, 0);
        for p in &parts {
            match self.sender.send(&p.body) {
                Outcome::Delivered { rejected, message } => {
                    if rejected > 0 || !message.is_empty() {
                        eprintln!(
                            "topdeck push: {} took the batch but refused {rejected} points: {message}",
                            self.sender.url()
                        );
                    }
                    points += p.points;
                    bytes += p.body.len();
                }
                Outcome::Retry { why, .. } => bail!(
                    "cannot push to {}: {why}; is a collector listening there? \
                     (set --endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)",
                    self.sender.url()
                ),
                Outcome::Refused { why } => bail!(
                    "{} refused the batch: {why}; check that it takes OTLP/HTTP protobuf metrics \
                     at that URL, and the headers it needs (--header, OTEL_EXPORTER_OTLP_HEADERS)",
                    self.sender.url()
                ),
            }
        }
        writeln!(
            out,
            "pushed {points} points from {registries} registries and portholes to {} \
             ({bytes} bytes in {} request{})",
            self.sender.url(),
            parts.len(),
            if parts.len() == 1 { "" } else { "s" }
        )?;
        Ok(())
    }

    /// One interval: a batch into the queue, then the queue sent, oldest
    /// first, while the receiver takes it.
    fn tick(&mut self) -> Result<()> {
        let (parts, _) = self.batch()?;
        let dropped: Vec<Pending> = parts.into_iter().flat_map(|p| self.queue.push(p)).collect();
        for old in dropped {
            self.drop_batch(QUEUE_FULL, &old);
            let outage = self
                .outage
                .get_or_insert_with(|| Outage::new(Instant::now()));
            if outage.dropped(&old) {
                eprintln!(
                    "topdeck push: the queue is full ({} requests): dropping the oldest; \
                     drops are counted in topdeck_push_dropped_total until delivery resumes",
                    self.queue.len()
                );
            }
        }
        while let Some(front) = self.queue.front() {
            if !self.backoff.ready(Instant::now()) {
                break;
            }
            match self.sender.send(&front.body) {
                Outcome::Delivered { rejected, message } => {
                    let sent = self.queue.pop().map_or(0, |p| p.body.len());
                    self.own.add(SENT, None, 1);
                    self.own.add(BYTES, None, sent as u64);
                    if rejected > 0 || !message.is_empty() {
                        self.own.add(REJECTED_POINTS, None, rejected.max(0) as u64);
                        eprintln!(
                            "topdeck push: {} took a batch but refused {rejected} points: {message}",
                            self.sender.url()
                        );
                    }
                    if let Some(outage) = self.outage.take() {
                        eprintln!(
                            "topdeck push: delivering to {} again; the outage {}",
                            self.sender.url(),
                            outage.summary(Instant::now(), self.backoff.failures())
                        );
                    }
                    self.backoff.succeeded();
                }
                Outcome::Retry { why, retry_after } => {
                    self.own.add(FAILED_ATTEMPTS, None, 1);
                    let wait = self
                        .backoff
                        .failed(Instant::now(), self.interval, retry_after);
                    self.outage
                        .get_or_insert_with(|| Outage::new(Instant::now()));
                    if self.backoff.failures() == 1 || retry_after.is_some() {
                        eprintln!(
                            "topdeck push: cannot push to {}: {why}; retrying in {} \
                             (the queue keeps up to {} requests)",
                            self.sender.url(),
                            humantime::format_duration(Duration::from_millis(
                                wait.as_millis() as u64
                            )),
                            self.queue.max_requests()
                        );
                    }
                    break;
                }
                Outcome::Refused { why } => {
                    if let Some(p) = self.queue.pop() {
                        self.drop_batch(REFUSED, &p);
                    }
                    if why != self.last_refusal {
                        eprintln!(
                            "topdeck push: {} refused a batch for good: {why}; it is dropped \
                             (check the URL and --header)",
                            self.sender.url()
                        );
                        self.last_refusal = why;
                    }
                    self.backoff.succeeded();
                }
            }
        }
        Ok(())
    }

    fn drop_batch(&mut self, reason: &str, p: &Pending) {
        self.own.add(DROPPED, Some(reason), 1);
        self.own.add(DROPPED_POINTS, None, p.points as u64);
    }
}

fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut z = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::fast(),
    );
    z.write_all(body)?;
    z.finish()
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// This host's name (`host.name`), as `uname -n` gives it.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf, which we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
