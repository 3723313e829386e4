//! The four scenarios, each on a local AWS of its own (moto behind the meter), with the
//! real relay and sender binaries driven by [`super::esm`] and receivers on 127.0.0.1:
//!
//! - **fan-out**: one tenant with `--fanout` endpoints (5,000) subscribed to everything, one
//!   event: the scenario that exposes the one-event partition;
//! - **hot endpoint**: 20 tenants of 10 endpoints and one hot endpoint that takes the
//!   target's share of the events (`--hot` / `--target`: 2,000 of 10,000/s, 20 %), 400
//!   events in each of three phases of equal length, published 40 at a time all through the
//!   phase (full batches mixed as at the target, the hot endpoint in demand throughout): it
//!   answers 200, then `429` with
//!   `Retry-After: 1`, then `503` (dead). Each phase is measured on its own (the requests in
//!   its time window, per pair published in it);
//! - **mixed**: `--mixed-endpoints` endpoints (10,000) over `--mixed-tenants` tenants (100),
//!   each subscribed to its own event type, `--mixed-events` events (1,500) each to one
//!   endpoint drawn at random, all published first so that the senders take full batches
//!   that mix endpoints and tenants (the event count is scaled down, not the shape);
//! - **burst**: 1,000 endpoints over 100 tenants, a steady rate and then ten times that for
//!   a few seconds (published 10 at a time, so that batches are full as at the target),
//!   each measured on its own; the burst phase runs until the backlog is delivered.
//!
//! The hot-endpoint and burst scenarios stand for the mixed scenario's world at the target
//! (10,000 endpoints over 100 tenants; their own endpoints are part of it, the rest is
//! virtual): the hot endpoint takes `--hot` of the target, every other endpoint an equal
//! share of the rest.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use tern_core::{Endpoint, EndpointId, Secret, TenantId};
use tern_local::{LocalOptions, LocalTern, MotoServer};

use super::analysis::Deliveries;
use super::esm::{Esm, EsmSetup, Invocation};
use super::keys::{IdKind, Ids};
use super::meter::{Meter, Record};
use super::model::{Member, Population};
use super::receiver::{Answer, Receivers};
use crate::{BoxError, payload_json, queue_depth};

/// Sizes of the runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sizes {
    /// Sender processes (warm instances) in every scenario.
    pub senders: usize,
    /// Endpoints of the fan-out event.
    pub fanout: usize,
    /// Tenants of the hot-endpoint scenario (10 endpoints each).
    pub hot_tenants: usize,
    /// Events of each phase of the hot-endpoint scenario, published 40 at a time through it.
    pub hot_events: usize,
    /// Length of each of its three phases, seconds.
    pub hot_phase_s: f64,
    /// Endpoints of the mixed scenario.
    pub mixed_endpoints: usize,
    /// Tenants of the mixed scenario.
    pub mixed_tenants: usize,
    /// Events of the mixed scenario.
    pub mixed_events: usize,
    /// Endpoints of the burst scenario (over the mixed scenario's tenants).
    pub burst_endpoints: usize,
    /// Steady events per second before the burst.
    pub burst_steady_per_s: f64,
    /// Seconds of the steady phase.
    pub burst_steady_s: f64,
    /// Seconds of the burst (at ten times the steady rate).
    pub burst_s: f64,
}

impl Default for Sizes {
    fn default() -> Self {
        Self {
            senders: 4,
            fanout: 5_000,
            hot_tenants: 20,
            hot_events: 400,
            hot_phase_s: 30.0,
            mixed_endpoints: 10_000,
            mixed_tenants: 100,
            mixed_events: 1_500,
            burst_endpoints: 1_000,
            burst_steady_per_s: 3.0,
            burst_steady_s: 20.0,
            burst_s: 10.0,
        }
    }
}

/// One phase of a scenario, before digestion.
pub struct PhaseRun {
    /// Name.
    pub name: String,
    /// Start and end on the meter's clock, seconds (requests in it belong to the phase).
    pub window: (f64, f64),
    /// How long the phase's traffic took, seconds.
    pub seconds: f64,
    /// Pairs published in it.
    pub deliveries: Deliveries,
    /// Events published in it.
    pub events: f64,
    /// Receiver POSTs in it.
    pub posts: u64,
    /// Projected at the burst rate.
    pub burst: bool,
}

/// One scenario's raw results.
pub struct ScenarioRun {
    /// Name.
    pub name: String,
    /// Phases.
    pub phases: Vec<PhaseRun>,
    /// The shape it stands for at the target.
    pub population: Population,
    /// Every request recorded.
    pub records: Vec<Record>,
    /// Every function invocation.
    pub invocations: Vec<Invocation>,
    /// Its ids.
    pub ids: Ids,
    /// Resource name prefix.
    pub prefix: String,
    /// Delivery queue's visibility timeout, seconds.
    pub visibility_s: f64,
    /// Seconds to set up (endpoints), and to run.
    pub setup_s: f64,
    /// Seconds the traffic ran.
    pub run_s: f64,
    /// Anything that did not go as planned.
    pub notes: Vec<String>,
}

/// A deterministic generator (splitmix64): the same draws on every run.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// An endpoint of a scenario: id, tenant, the event types it takes.
#[derive(Clone)]
struct Ep {
    id: String,
    tenant: String,
    types: Vec<String>,
}

struct Deployment {
    _moto: MotoServer,
    meter: Meter,
    local: LocalTern,
    receivers: Receivers,
    app: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    prefix: String,
    ids: Ids,
    esm: Option<Esm>,
    log_dir: PathBuf,
    setup_s: f64,
    visibility_s: f64,
}

fn labels(senders: usize) -> Vec<String> {
    let mut l: Vec<String> = ["relay", "esm", "app"].map(str::to_owned).to_vec();
    l.extend((0..senders).map(|n| format!("sender-{n}")));
    l
}

impl Deployment {
    async fn new(
        name: &str,
        endpoints: &[Ep],
        sizes: &Sizes,
        out: &Path,
    ) -> Result<Self, BoxError> {
        let started = std::time::Instant::now();
        let moto = MotoServer::start().await?;
        let meter = Meter::start(&moto.url, &labels(sizes.senders)).await?;
        let prefix = format!("scale-{name}-{}-", std::process::id());
        let options = LocalOptions {
            prefix: prefix.clone(),
            console_port: None,
            ..LocalOptions::default()
        };
        // Set-up goes to moto directly: not metered.
        let local = LocalTern::create(moto.sdk_config().await, &options).await?;
        let receivers = Receivers::start().await?;
        let mut ids = Ids::default();
        let now = chrono::Utc::now();
        let mut puts = futures::stream::iter(endpoints.iter().map(|ep| {
            let store = local.sender.endpoints.clone();
            let (id, tenant, url, types) = (
                ep.id.clone(),
                ep.tenant.clone(),
                receivers.url(&ep.id),
                ep.types.clone(),
            );
            async move {
                let endpoint = Endpoint::new(
                    EndpointId::new(id)?,
                    TenantId::new(tenant)?,
                    url,
                    types,
                    Secret::generate(),
                    now,
                );
                store.put(&endpoint).await?;
                Ok::<(), BoxError>(())
            }
        }))
        .buffer_unordered(16);
        let mut made = 0;
        while let Some(done) = puts.next().await {
            done?;
            made += 1;
            if made % 2000 == 0 {
                eprintln!("scale: {name}: {made} of {} endpoints", endpoints.len());
            }
        }
        drop(puts);
        for ep in endpoints {
            ids.add(IdKind::Endpoint, &ep.id);
            ids.add(IdKind::Tenant, &ep.tenant);
        }
        let sqs = aws_sdk_sqs::Client::new(&moto.sdk_config().await);
        let visibility_s = sqs
            .get_queue_attributes()
            .queue_url(&local.resources.delivery_queue_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout)
            .send()
            .await?
            .attributes
            .and_then(|a| {
                a.get(&aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout)
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0.0);
        let app = aws_sdk_dynamodb::Client::new(
            &tern_local::moto::sdk_config_for(&meter.url("app")).await,
        );
        let log_dir = out.join("scale-logs").join(name);
        std::fs::create_dir_all(&log_dir)?;
        Ok(Self {
            _moto: moto,
            meter,
            local,
            receivers,
            app,
            sqs,
            prefix,
            ids,
            esm: None,
            log_dir,
            setup_s: started.elapsed().as_secs_f64(),
            visibility_s,
        })
    }

    /// Registers the events' ids and starts the mappings.
    async fn start(
        &mut self,
        events: &[String],
        sizes: &Sizes,
        bin_dir: &Path,
    ) -> Result<(), BoxError> {
        for e in events {
            self.ids.add(IdKind::Event, e);
        }
        self.meter.set_ids(self.ids.clone());
        let meter_url = |l: &str| self.meter.url(l);
        let clock_meter = self.meter_clock();
        self.esm = Some(
            Esm::start(EsmSetup {
                bin_dir,
                env: &self.local.env,
                url: &meter_url,
                clock: clock_meter,
                ids: self.ids.clone(),
                stream_arn: self.local.resources.outbox_stream_arn.clone(),
                queue_url: self.local.resources.delivery_queue_url.clone(),
                senders: sizes.senders,
                log_dir: &self.log_dir,
            })
            .await?,
        );
        Ok(())
    }

    fn meter_clock(&self) -> std::sync::Arc<dyn Fn() -> f64 + Send + Sync> {
        let started = std::time::Instant::now();
        let offset = self.meter.now();
        std::sync::Arc::new(move || offset + started.elapsed().as_secs_f64())
    }

    /// Writes one event to the outbox as the application does (through the meter, as
    /// `app`; a `PutItem` of the item its transaction would put).
    async fn publish(&self, id: &str, event_type: &str, tenant: &str) -> Result<(), BoxError> {
        let writer = tern_outbox::OutboxWriter::new(&self.local.resources.outbox_table);
        let prepared = writer.prepare_with_id(
            tern_core::EventId::new(id)?,
            event_type,
            tenant,
            payload_json(crate::SMALL_PAYLOAD, "scale"),
        )?;
        let item = prepared.transact_item()?;
        let put = item.put().ok_or("the outbox item is not a Put")?;
        self.app
            .put_item()
            .table_name(put.table_name())
            .set_item(Some(put.item().clone()))
            .set_condition_expression(put.condition_expression().map(str::to_owned))
            .set_expression_attribute_names(put.expression_attribute_names().cloned())
            .set_expression_attribute_values(put.expression_attribute_values().cloned())
            .send()
            .await?;
        Ok(())
    }

    /// Publishes `events` at `per_s` events a second on average, `chunk` at a time (each
    /// chunk at once, so that the senders find full batches).
    async fn publish_paced(
        &self,
        events: &[(String, Ep)],
        per_s: f64,
        chunk: usize,
    ) -> Result<(), BoxError> {
        let every = Duration::from_secs_f64(chunk.max(1) as f64 / per_s.max(0.001));
        let mut tick = tokio::time::interval(every);
        for part in events.chunks(chunk.max(1)) {
            tick.tick().await;
            let mut writes = futures::stream::iter(
                part.iter()
                    .map(|(e, ep)| self.publish(e, &ep.types[0], &ep.tenant)),
            )
            .buffer_unordered(8);
            while let Some(done) = writes.next().await {
                done?;
            }
        }
        Ok(())
    }

    async fn queue_empty(&self) -> Result<bool, BoxError> {
        Ok(queue_depth(&self.sqs, &self.local.resources.delivery_queue_url).await? == 0)
    }

    /// Waits until `posts` POSTs arrived and the queue is empty, at most `limit`.
    async fn drain(&self, posts: u64, limit: Duration) -> Result<Option<String>, BoxError> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut last_report = tokio::time::Instant::now();
        loop {
            if self.receivers.total() >= posts && self.queue_empty().await? {
                // The last deletes and markers land.
                tokio::time::sleep(Duration::from_secs(1)).await;
                return Ok(None);
            }
            if tokio::time::Instant::now() > deadline {
                return Ok(Some(format!(
                    "stopped after {:.0} s with {} of {posts} POSTs",
                    limit.as_secs_f64(),
                    self.receivers.total()
                )));
            }
            if last_report.elapsed() > Duration::from_secs(20) {
                eprintln!("scale:   {} of {posts} POSTs", self.receivers.total());
                last_report = tokio::time::Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn finish(
        mut self,
        name: &str,
        phases: Vec<PhaseRun>,
        population: Population,
        run_s: f64,
        notes: Vec<String>,
    ) -> ScenarioRun {
        let mut invocations = Vec::new();
        if let Some(esm) = self.esm.take() {
            let log = esm.log.clone();
            esm.stop().await;
            // Requests of invocations that finished while stopping belong to the run.
            tokio::time::sleep(Duration::from_millis(500)).await;
            invocations = log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
        }
        ScenarioRun {
            name: name.to_owned(),
            phases,
            population,
            records: self.meter.take(),
            invocations,
            ids: self.ids.clone(),
            prefix: self.prefix.clone(),
            visibility_s: self.visibility_s,
            setup_s: self.setup_s,
            run_s,
            notes,
        }
    }
}

fn uniform(endpoints: &[Ep]) -> Population {
    let w = 1.0 / endpoints.len().max(1) as f64;
    Population::new(
        endpoints
            .iter()
            .map(|e| Member {
                endpoint: e.id.clone(),
                tenant: e.tenant.clone(),
                weight: w,
            })
            .collect(),
    )
}

/// The world a scenario stands for at the target: its `real` endpoints, padded with
/// virtual ones (no traffic in the run, a share at the target) to `endpoints` over
/// `tenants` (the mixed scenario's world), every endpoint with an equal share except
/// `hot`, which takes its own share while the others share the rest.
fn world(real: &[Ep], endpoints: usize, tenants: usize, hot: Option<(&str, f64)>) -> Population {
    let per_tenant = (endpoints / tenants.max(1)).max(1);
    let mut by_tenant: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for ep in real {
        by_tenant.entry(&ep.tenant).or_default().push(&ep.id);
    }
    let mut members: Vec<(String, String)> = Vec::new();
    for (tenant, eps) in &by_tenant {
        members.extend(eps.iter().map(|e| ((*e).to_owned(), (*tenant).to_owned())));
        members.extend(
            (eps.len()..per_tenant)
                .map(|i| (format!("virtual_{tenant}_{i}"), (*tenant).to_owned())),
        );
    }
    for t in by_tenant.len()..tenants {
        members
            .extend((0..per_tenant).map(|i| (format!("virtual_{t}_{i}"), format!("virtual_{t}"))));
    }
    let n = members.len().max(1) as f64;
    let (hot_id, hot_share) = hot.unwrap_or(("", 0.0));
    let rest = if hot.is_some() {
        (1.0 - hot_share) / (n - 1.0).max(1.0)
    } else {
        1.0 / n
    };
    Population::new(
        members
            .into_iter()
            .map(|(endpoint, tenant)| Member {
                weight: if endpoint == hot_id { hot_share } else { rest },
                endpoint,
                tenant,
            })
            .collect(),
    )
}

/// Endpoints `prefix`-numbered over `tenants` tenants, each taking its own event type.
fn spread(prefix: &str, endpoints: usize, tenants: usize) -> Vec<Ep> {
    (0..endpoints)
        .map(|i| {
            let id = format!("ep_{prefix}_{i:05}");
            Ep {
                tenant: format!("tnt_{prefix}_{:03}", i % tenants.max(1)),
                types: vec![format!("t.{id}")],
                id,
            }
        })
        .collect()
}

/// The fan-out scenario.
pub async fn fan_out(sizes: &Sizes, bin_dir: &Path, out: &Path) -> Result<ScenarioRun, BoxError> {
    let endpoints: Vec<Ep> = (0..sizes.fanout)
        .map(|i| Ep {
            id: format!("ep_f_{i:05}"),
            tenant: "tnt_f".into(),
            types: vec!["*".into()],
        })
        .collect();
    let mut d = Deployment::new("fanout", &endpoints, sizes, out).await?;
    eprintln!(
        "scale: fan-out: {} endpoints set up in {:.0} s",
        endpoints.len(),
        d.setup_s
    );
    let event = "evt_f_1".to_owned();
    d.start(std::slice::from_ref(&event), sizes, bin_dir)
        .await?;
    let t0 = d.meter.now();
    d.publish(&event, "order.paid", "tnt_f").await?;
    let note = d
        .drain(endpoints.len() as u64, Duration::from_secs(900))
        .await?;
    let t1 = d.meter.now();
    let mut deliveries = Deliveries::default();
    for ep in &endpoints {
        deliveries.add(&event, &ep.id, &ep.tenant, 1.0);
    }
    let phases = vec![PhaseRun {
        name: format!("1 event x {}", endpoints.len()),
        // Until the proxy is stopped: the last deletes and markers land after the drain.
        window: (t0, f64::INFINITY),
        seconds: t1 - t0,
        deliveries,
        events: 1.0,
        posts: d.receivers.total(),
        burst: false,
    }];
    let population = uniform(&endpoints);
    Ok(d.finish(
        "fan-out",
        phases,
        population,
        t1 - t0,
        note.into_iter().collect(),
    )
    .await)
}

/// The mixed scenario.
pub async fn mixed(sizes: &Sizes, bin_dir: &Path, out: &Path) -> Result<ScenarioRun, BoxError> {
    let endpoints = spread("m", sizes.mixed_endpoints, sizes.mixed_tenants);
    let mut d = Deployment::new("mixed", &endpoints, sizes, out).await?;
    eprintln!(
        "scale: mixed: {} endpoints set up in {:.0} s",
        endpoints.len(),
        d.setup_s
    );
    let mut draw = Draw(29);
    let plan: Vec<(String, Ep)> = (0..sizes.mixed_events)
        .map(|i| {
            (
                format!("evt_m_{i:05}"),
                endpoints[draw.below(endpoints.len())].clone(),
            )
        })
        .collect();
    let events: Vec<String> = plan.iter().map(|(e, _)| e.clone()).collect();
    d.start(&events, sizes, bin_dir).await?;
    let t0 = d.meter.now();
    let mut deliveries = Deliveries::default();
    {
        let mut writes = futures::stream::iter(
            plan.iter()
                .map(|(e, ep)| d.publish(e, &ep.types[0], &ep.tenant)),
        )
        .buffer_unordered(8);
        while let Some(done) = writes.next().await {
            done?;
        }
    }
    for (e, ep) in &plan {
        deliveries.add(e, &ep.id, &ep.tenant, 1.0);
    }
    let note = d.drain(plan.len() as u64, Duration::from_secs(600)).await?;
    let t1 = d.meter.now();
    let phases = vec![PhaseRun {
        name: format!(
            "{} events, {} endpoints, {} tenants",
            plan.len(),
            endpoints.len(),
            sizes.mixed_tenants
        ),
        window: (t0, f64::INFINITY),
        seconds: t1 - t0,
        deliveries,
        events: plan.len() as f64,
        posts: d.receivers.total(),
        burst: false,
    }];
    let population = uniform(&endpoints);
    Ok(d.finish(
        "mixed",
        phases,
        population,
        t1 - t0,
        note.into_iter().collect(),
    )
    .await)
}

/// The hot-endpoint scenario: its endpoint's share at the target is `hot_share`.
pub async fn hot(
    sizes: &Sizes,
    bin_dir: &Path,
    out: &Path,
    hot_share: f64,
) -> Result<ScenarioRun, BoxError> {
    let mut endpoints = spread("h", sizes.hot_tenants * 10, sizes.hot_tenants);
    let hot = Ep {
        id: "ep_h_hot".into(),
        tenant: "tnt_h_000".into(),
        types: vec!["hot.order".into()],
    };
    endpoints.push(hot.clone());
    let mut d = Deployment::new("hot", &endpoints, sizes, out).await?;
    let others: Vec<Ep> = endpoints[..endpoints.len() - 1].to_vec();
    let per_phase = sizes.hot_events;
    let mut draw = Draw(7);
    let phases_plan = [
        ("healthy (200)", Answer::Ok),
        (
            "429 with Retry-After: 1",
            Answer::TooMany {
                retry_after_seconds: 1,
            },
        ),
        ("dead (503)", Answer::Unavailable),
    ];
    let plan: Vec<Vec<(String, Ep)>> = (0..phases_plan.len())
        .map(|p| {
            (0..per_phase)
                .map(|i| {
                    let ep = if draw.chance(hot_share) {
                        hot.clone()
                    } else {
                        others[draw.below(others.len())].clone()
                    };
                    (format!("evt_h_{p}_{i:05}"), ep)
                })
                .collect()
        })
        .collect();
    let events: Vec<String> = plan.iter().flatten().map(|(e, _)| e.clone()).collect();
    d.start(&events, sizes, bin_dir).await?;
    let t_start = d.meter.now();
    let mut phases = Vec::new();
    for ((name, answer), events) in phases_plan.iter().zip(&plan) {
        d.receivers.set(&hot.id, *answer);
        let t0 = d.meter.now();
        let posts0 = d.receivers.total();
        let mut deliveries = Deliveries::default();
        // In chunks of 40 over the phase: the senders take full batches, mixed as at the
        // target (the hot endpoint's share of each batch is its share of the traffic), and
        // every instance is handed the hot endpoint all through the phase.
        d.publish_paced(events, events.len() as f64 / sizes.hot_phase_s, 40)
            .await?;
        for (e, ep) in events {
            deliveries.add(e, &ep.id, &ep.tenant, 1.0);
        }
        // The phase lasts its planned length.
        let planned = t0 + sizes.hot_phase_s;
        let now = d.meter.now();
        if now < planned {
            tokio::time::sleep(Duration::from_secs_f64(planned - now)).await;
        }
        let t1 = d.meter.now();
        eprintln!(
            "scale: hot endpoint: {name}: {} events, {} POSTs to the hot endpoint so far",
            events.len(),
            d.receivers.posts(&hot.id)
        );
        phases.push(PhaseRun {
            name: (*name).to_owned(),
            window: (t0, t1),
            seconds: t1 - t0,
            deliveries,
            events: events.len() as f64,
            posts: d.receivers.total() - posts0,
            burst: false,
        });
    }
    let t_end = d.meter.now();
    let population = world(
        &endpoints,
        sizes.mixed_endpoints,
        sizes.mixed_tenants,
        Some((&hot.id, hot_share)),
    );
    Ok(d.finish(
        "hot endpoint",
        phases,
        population,
        t_end - t_start,
        Vec::new(),
    )
    .await)
}

/// Events published at once in the burst scenario: a sender batch's worth.
const CHUNK: usize = 10;

/// The burst scenario.
pub async fn burst(sizes: &Sizes, bin_dir: &Path, out: &Path) -> Result<ScenarioRun, BoxError> {
    let endpoints = spread("b", sizes.burst_endpoints, sizes.mixed_tenants);
    let mut d = Deployment::new("burst", &endpoints, sizes, out).await?;
    let mut draw = Draw(11);
    let steady_n = (sizes.burst_steady_per_s * sizes.burst_steady_s).round() as usize;
    let burst_rate = sizes.burst_steady_per_s * 10.0;
    let burst_n = (burst_rate * sizes.burst_s).round() as usize;
    let plan: Vec<(String, Ep)> = (0..steady_n + burst_n)
        .map(|i| {
            (
                format!("evt_b_{i:05}"),
                endpoints[draw.below(endpoints.len())].clone(),
            )
        })
        .collect();
    let events: Vec<String> = plan.iter().map(|(e, _)| e.clone()).collect();
    d.start(&events, sizes, bin_dir).await?;
    let mut phases = Vec::new();
    let t_start = d.meter.now();
    for (name, slice, rate, burst) in [
        (
            format!("steady, {} events/s", sizes.burst_steady_per_s),
            &plan[..steady_n],
            sizes.burst_steady_per_s,
            false,
        ),
        (
            format!("10x burst, {burst_rate} events/s, until delivered"),
            &plan[steady_n..],
            burst_rate,
            true,
        ),
    ] {
        let t0 = d.meter.now();
        let posts0 = d.receivers.total();
        let mut deliveries = Deliveries::default();
        d.publish_paced(slice, rate, CHUNK).await?;
        for (e, ep) in slice {
            deliveries.add(e, &ep.id, &ep.tenant, 1.0);
        }
        let mut note = None;
        if burst {
            note = d.drain(plan.len() as u64, Duration::from_secs(600)).await?;
        }
        let t1 = d.meter.now();
        phases.push(PhaseRun {
            name,
            // The burst runs until its backlog is delivered, and takes what lands after.
            window: (t0, if burst { f64::INFINITY } else { t1 }),
            seconds: t1 - t0,
            deliveries,
            events: slice.len() as f64,
            posts: d.receivers.total() - posts0,
            burst,
        });
        if let Some(n) = note {
            eprintln!("scale: burst: {n}");
        }
    }
    let t_end = d.meter.now();
    let population = world(&endpoints, sizes.mixed_endpoints, sizes.mixed_tenants, None);
    Ok(
        d.finish("burst", phases, population, t_end - t_start, Vec::new())
            .await,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_stands_for_the_mixed_world_with_its_hot_endpoint_at_its_share() {
        let mut real = spread("h", 20, 2);
        real.push(Ep {
            id: "ep_h_hot".into(),
            tenant: "tnt_h_000".into(),
            types: vec![],
        });
        let p = world(&real, 1000, 10, Some(("ep_h_hot", 0.2)));
        assert_eq!(p.members.len(), 1000, "10 tenants of 100 endpoints");
        let total: f64 = p.members.iter().map(|m| m.weight).sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        assert_eq!(
            p.weight(&super::super::keys::Group::Endpoint("ep_h_hot".into())),
            0.2
        );
        // The hot endpoint's tenant: the hot share plus 99 others of 0.8 / 999.
        let tenant = p.weight(&super::super::keys::Group::Tenant("tnt_h_000".into()));
        assert!(
            (tenant - (0.2 + 99.0 * 0.8 / 999.0)).abs() < 1e-9,
            "{tenant}"
        );
        let even = world(&spread("b", 10, 10), 1000, 10, None);
        assert!(
            (even.weight(&super::super::keys::Group::Tenant("tnt_b_003".into())) - 0.1).abs()
                < 1e-9
        );
    }
}
