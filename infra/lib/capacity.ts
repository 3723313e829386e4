/**
 * Capacity as one decision: from the deliveries per second a deployment must carry
 * (settings.json `capacity.targetDeliveriesPerSecond`, or `-c tern:targetDeliveriesPerSecond`)
 * this file derives every number that bounds throughput: the sender mapping's maximum
 * concurrency and the sender's reserved concurrency, the relay's parallelization factor, the
 * provisioned-mode maxima of every table and of the waiting index, and the API stage's
 * throttling. It is the one place the derivation lives: the CDK app calls it, and
 * template.yaml's `CapacityBySize` mapping holds its output for each size SAM allows
 * (`SAM_SIZES`; test/capacity.test.ts checks every row against this code).
 *
 * Every constant below is an assumption about the workload, named with its source; the
 * workload model is written out in docs/capacity.md.
 */

/** Deliveries per second of each size template.yaml's TargetDeliveriesPerSecond allows (its AllowedValues). */
export const SAM_SIZES = [100, 2000, 10000, 30000] as const;

/**
 * Seconds one sender batch takes, assumed: the slowest of its POSTs plus its DynamoDB writes.
 * The scale model's typical batch is 0.3 s (the slowest of 10 POSTs to receivers answering in
 * 100-300 ms, plus about 40 ms of DynamoDB); sized at 0.5 s the mapping keeps up when
 * receivers answer two-thirds slower than that. A higher cap costs nothing while idle.
 */
export const ASSUMED_BATCH_SECONDS = 0.5;

/** Most concurrent batches one SQS event source mapping runs: `ScalingConfig.MaximumConcurrency` is 2-1,000 (Lambda API, ScalingConfig). */
export const ESM_MAX_CONCURRENCY = 1000;
/** Fewest: `MaximumConcurrency` below 2 is refused (Lambda API, ScalingConfig). */
export const ESM_MIN_CONCURRENCY = 2;

/**
 * Concurrency Lambda keeps unreserved in every account: reserved concurrency may not take the
 * last 100 of the account's quota (Lambda developer guide, "Configuring reserved concurrency").
 */
export const UNRESERVED_CONCURRENCY_MINIMUM = 100;
/** An account's default Lambda concurrency quota per Region (Lambda quotas; new accounts may get less). */
export const DEFAULT_ACCOUNT_CONCURRENCY = 1000;

/**
 * Write capacity units one outbox event takes: a 1.3 KB item (2 units) in the application's
 * own transaction, which DynamoDB bills twice (docs/cost.md). A publish through the API is a
 * plain put, 2 units: 4 is the larger.
 */
export const OUTBOX_WCU_PER_EVENT = 4;
/** Write units one DynamoDB partition, so one stream shard, takes per second (DynamoDB partition limit). */
export const PARTITION_WCU = 1000;
/** Partitions, so stream shards, of a new on-demand table: it takes 4,000 write units at once (DynamoDB on-demand, initial throughput). */
export const NEW_TABLE_SHARDS = 4;
/**
 * Outbox records one relay batch handles per second: one endpoints Query (about 7 ms) per
 * record and its share of the `SendMessageBatch` calls (8 in flight, 20 ms each), 138 a
 * second, for events of one delivery each (more deliveries per event mean fewer events).
 */
export const RELAY_RECORDS_PER_SECOND = 138;
/** `ParallelizationFactor` of a stream mapping: 1-10 (Lambda, DynamoDB Streams event source parameters). */
export const MAX_PARALLELIZATION_FACTOR = 10;

/**
 * Capacity units per delivery of each table and of the waiting index, for provisioned mode.
 * The workload is the scale model's: mixed sender batches (a batch of 10 touches 9 distinct
 * endpoints), 1 % of deliveries retried once, one delivery per outbox event, 10,000 active
 * endpoints read by 300 warm senders. `0` where nothing on the delivery path reads or writes:
 * those dimensions get {@link READER_UNITS} (the API, the console, `tern audit`).
 */
export const UNITS_PER_DELIVERY = {
  outbox: { read: 0, write: OUTBOX_WCU_PER_EVENT },
  // The sender's strongly consistent GetItem of an endpoint on a cache miss (0.95 of
  // deliveries at 10,000 endpoints and 300 senders) and the relay's reads of the event's
  // tenant (the paper model's Query, about 2 read units an event). With the relay's
  // subscription cache the scale meter's counts give about 2.1 in all (docs/scale.md, "The
  // relay's tenant reads, cached"): 2.95 keeps headroom.
  endpoints: { read: 2.95, write: 0 },
  // Claim and delivered marker (2, docs/cost.md), the endpoint log (0.9: one per endpoint per
  // batch), a retry's rows (1 % x 7.9).
  attempts: { read: 0, write: 2.98 },
  // One health update per endpoint per batch (0.9, plus the retries'); an eventually
  // consistent read per endpoint per warm sender every 5 s (0.5 of a unit, 0.99 of deliveries).
  health: { read: 0.5, write: 0.91 },
  // Two index writes per delivery that waits (listed, then removed at its claim). A GSI short of
  // write capacity throttles the table's writes (DynamoDB, GSI write throttling): sized for a
  // quarter of deliveries waiting (a large receiver's outage), not the model's 1 %.
  waitingIndex: { read: 0, write: 0.5 },
} as const;

/** The maximum of a dimension nothing on the delivery path uses (readers only): capacity units. */
export const READER_UNITS = 100;

/**
 * Events per API request assumed when sizing the stage's throttling: the target published
 * through the API in batches of 10 on average (`publishEventBatch` takes up to 100). An
 * application that publishes one event per request at its full rate sets
 * `apiThrottlingRateLimit` itself.
 */
export const API_EVENTS_PER_REQUEST = 10;
/** The stage limits of the smallest deployment (requests per second, burst): never less. */
export const API_MIN_RATE = 100;
export const API_MIN_BURST = 200;
/** API Gateway's quota per account and Region, shared by every API: 10,000 requests per second, burst 5,000 (API Gateway quotas). */
export const API_MAX_RATE = 10000;
export const API_MAX_BURST = 5000;

/** One capacity dimension's auto scaling range, capacity units. */
export interface UnitsRange {
  readonly min: number;
  readonly max: number;
}

/** Read and write ranges of a table or index. */
export interface DerivedTableCapacity {
  readonly read: UnitsRange;
  readonly write: UnitsRange;
}

export type CapacityTable = keyof typeof UNITS_PER_DELIVERY;
export const CAPACITY_TABLES: readonly CapacityTable[] = ['outbox', 'endpoints', 'attempts', 'health', 'waitingIndex'];

/** The minima (provisioned mode's idle capacity, which costs while idle): settings.json `capacity.minimum`. */
export type CapacityMinimum = Record<CapacityTable, { readonly read: number; readonly write: number }>;

/** What the inputs say, besides the target. */
export interface CapacityInputs {
  /** Messages per sender batch (the mapping's BatchSize, 1-10). */
  readonly senderBatchSize: number;
  /** Auto scaling's target utilization, percent. */
  readonly targetUtilizationPercent: number;
  /** Provisioned minima per table and index. */
  readonly minimum: CapacityMinimum;
}

/** Every number the target decides. */
export interface CapacityPlan {
  readonly targetDeliveriesPerSecond: number;
  /** The sender mapping's ScalingConfig.MaximumConcurrency (2-1,000). */
  readonly senderMaxConcurrency: number;
  /** The sender's reserved concurrency: its maximum concurrency, so the mapping is never throttled. */
  readonly senderReservedConcurrency: number;
  /** Deliveries per second the sender mapping carries at {@link ASSUMED_BATCH_SECONDS}: below the target when capped at 1,000. */
  readonly senderCarriesPerSecond: number;
  /** The relay mapping's ParallelizationFactor (1-10). */
  readonly relayParallelizationFactor: number;
  /** The API stage's steady rate, requests per second. */
  readonly apiThrottlingRateLimit: number;
  /** The API stage's burst, requests. */
  readonly apiThrottlingBurstLimit: number;
  /** Provisioned mode: each table's and the waiting index's ranges. */
  readonly tables: Record<CapacityTable, DerivedTableCapacity>;
}

const clamp = (v: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, v));

/**
 * Derives a deployment's capacity from the deliveries per second it must carry.
 *
 * @param target deliveries per second, a whole number of at least 1
 * @throws Error for a target that is not a positive whole number, or inputs out of range
 */
export function deriveCapacity(target: number, inputs: CapacityInputs): CapacityPlan {
  if (!Number.isInteger(target) || target < 1) {
    throw new Error(`targetDeliveriesPerSecond must be a whole number of at least 1, got ${target}`);
  }
  const { senderBatchSize: batch, targetUtilizationPercent: util } = inputs;
  if (!Number.isInteger(batch) || batch < 1 || batch > 10) throw new Error(`senderBatchSize must be 1-10, got ${batch}`);
  if (!(util >= 20 && util <= 90)) throw new Error(`targetUtilizationPercent must be 20-90, got ${util}`);

  // Concurrent batches = deliveries per second x seconds per batch / deliveries per batch.
  const needed = Math.ceil((target * ASSUMED_BATCH_SECONDS) / batch);
  const senderMaxConcurrency = clamp(needed, ESM_MIN_CONCURRENCY, ESM_MAX_CONCURRENCY);

  // One stream shard per outbox partition: a new table's 4, then one per 1,000 write units.
  const shards = Math.max(NEW_TABLE_SHARDS, Math.ceil((target * OUTBOX_WCU_PER_EVENT) / PARTITION_WCU));
  const eventsPerShard = target / shards;
  const relayParallelizationFactor = clamp(Math.ceil(eventsPerShard / RELAY_RECORDS_PER_SECOND), 1, MAX_PARALLELIZATION_FACTOR);

  const apiThrottlingRateLimit = clamp(Math.ceil(target / API_EVENTS_PER_REQUEST), API_MIN_RATE, API_MAX_RATE);
  const apiThrottlingBurstLimit = clamp(2 * apiThrottlingRateLimit, API_MIN_BURST, API_MAX_BURST);

  // Auto scaling holds consumed / provisioned near the target utilization: carrying the
  // target's units takes units / utilization at the top of the range.
  // In hundredths of a unit, so the arithmetic is exact.
  const maximum = (perDelivery: number, min: number) => {
    const hundredths = Math.round(perDelivery * 100);
    return Math.max(min, hundredths > 0 ? Math.ceil((target * hundredths) / util) : READER_UNITS);
  };
  const tables = Object.fromEntries(
    CAPACITY_TABLES.map((t) => {
      const u = UNITS_PER_DELIVERY[t];
      const m = inputs.minimum[t];
      return [t, { read: { min: m.read, max: maximum(u.read, m.read) }, write: { min: m.write, max: maximum(u.write, m.write) } }];
    }),
  ) as Record<CapacityTable, DerivedTableCapacity>;

  return {
    targetDeliveriesPerSecond: target,
    senderMaxConcurrency,
    senderReservedConcurrency: senderMaxConcurrency,
    senderCarriesPerSecond: Math.floor((senderMaxConcurrency * batch) / ASSUMED_BATCH_SECONDS),
    relayParallelizationFactor,
    apiThrottlingRateLimit,
    apiThrottlingBurstLimit,
    tables,
  };
}

/** The names of template.yaml's `CapacityBySize` row entries, and what each holds. */
export function samRow(plan: CapacityPlan): Record<string, number> {
  const row: Record<string, number> = {
    SenderMaxConcurrency: plan.senderMaxConcurrency,
    RelayParallelizationFactor: plan.relayParallelizationFactor,
    ApiThrottlingRateLimit: plan.apiThrottlingRateLimit,
    ApiThrottlingBurstLimit: plan.apiThrottlingBurstLimit,
  };
  for (const t of CAPACITY_TABLES) {
    const name = t.charAt(0).toUpperCase() + t.slice(1);
    row[`${name}ReadMax`] = plan.tables[t].read.max;
    row[`${name}WriteMax`] = plan.tables[t].write.max;
  }
  return row;
}
