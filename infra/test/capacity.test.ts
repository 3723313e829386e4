/**
 * Capacity as one decision (lib/capacity.ts): what a target decides, that it only grows with
 * the target and stays inside AWS's limits, that template.yaml's rows are the formula's
 * output, and how the stack applies it (overrides, reservation, the account's quota).
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import { createApp } from '../lib/app';
import {
  API_MAX_BURST,
  API_MAX_RATE,
  CAPACITY_TABLES,
  CapacityInputs,
  CapacityPlan,
  deriveCapacity,
  ESM_MAX_CONCURRENCY,
  ESM_MIN_CONCURRENCY,
  MAX_PARALLELIZATION_FACTOR,
  SAM_SIZES,
  samRow,
} from '../lib/capacity';
import { TernStack, TernStackProps } from '../lib/tern-stack';
import { samTemplate, settings, sizeContext } from './helpers';

const inputs: CapacityInputs = {
  senderBatchSize: settings.eventSources.sender.batchSize,
  targetUtilizationPercent: settings.capacity.targetUtilizationPercent,
  minimum: settings.capacity.minimum,
};

function build(props: TernStackProps = {}, context: Record<string, unknown> = {}): TernStack {
  const app = createApp({ skipBundling: true, nag: false, context, outdir: fs.mkdtempSync(path.join(os.tmpdir(), 'tern-cap-')) });
  return new TernStack(app, 'Tern', props);
}

/** Every number of a plan, flattened, for comparing two plans value by value. */
function numbers(p: CapacityPlan): Record<string, number> {
  return { ...samRow(p), SenderReservedConcurrency: p.senderReservedConcurrency, SenderCarriesPerSecond: p.senderCarriesPerSecond };
}

describe('the derivation', () => {
  test('2,000 deliveries/s: 100 concurrent sender batches (reserved), relay factor 2, API 200/s burst 400, and the provisioned maxima', () => {
    const p = deriveCapacity(2000, inputs);
    // 2,000/s x 0.5 s per batch / 10 per batch.
    expect(p.senderMaxConcurrency).toBe(100);
    expect(p.senderReservedConcurrency).toBe(100);
    expect(p.senderCarriesPerSecond).toBe(2000);
    // 8 stream shards (8,000 write units of outbox events / 1,000 per partition), 250 events/s
    // each, 138 a second per relay batch: 2 batches per shard.
    expect(p.relayParallelizationFactor).toBe(2);
    // Batches of 10 events on average: 200 requests/s, twice that at once.
    expect([p.apiThrottlingRateLimit, p.apiThrottlingBurstLimit]).toEqual([200, 400]);
    // units per delivery x 2,000 / 70 %, rounded up; readers-only dimensions 100.
    expect(p.tables).toEqual({
      outbox: { read: { min: 1, max: 100 }, write: { min: 5, max: 11429 } },
      endpoints: { read: { min: 5, max: 8429 }, write: { min: 1, max: 100 } },
      attempts: { read: { min: 1, max: 100 }, write: { min: 10, max: 8515 } },
      health: { read: { min: 5, max: 1429 }, write: { min: 5, max: 2600 } },
      waitingIndex: { read: { min: 1, max: 100 }, write: { min: 10, max: 1429 } },
    });
  });

  test('the smallest and the largest sizes: 5 and 1,000 concurrent batches; 30,000/s is more than one mapping carries', () => {
    const small = deriveCapacity(100, inputs);
    expect([small.senderMaxConcurrency, small.relayParallelizationFactor, small.apiThrottlingRateLimit, small.apiThrottlingBurstLimit]).toEqual([5, 1, 100, 200]);
    const big = deriveCapacity(30000, inputs);
    expect(big.senderMaxConcurrency).toBe(ESM_MAX_CONCURRENCY);
    expect(big.senderCarriesPerSecond).toBe(20000);
    expect([big.apiThrottlingRateLimit, big.apiThrottlingBurstLimit]).toEqual([3000, API_MAX_BURST]);
  });

  test('the default deployment carries at least 2,000 deliveries/s', () => {
    expect(settings.capacity.targetDeliveriesPerSecond).toBeGreaterThanOrEqual(2000);
    const c = build().config;
    expect(c.capacity.targetDeliveriesPerSecond).toBe(settings.capacity.targetDeliveriesPerSecond);
    // What the mapping's concurrency carries at the assumed 0.5 s per batch of 10.
    expect((c.senderMaxConcurrency * c.senderBatchSize) / 0.5).toBeGreaterThanOrEqual(2000);
    expect(c.senderReservedConcurrency).toBe(c.senderMaxConcurrency);
  });

  test('every number grows (or stays) with the target, from 1 to 1,000,000 deliveries/s', () => {
    const targets = [1, 2, 5, 10, 50, 100, 137, 250, 500, 551, 553, 999, 1000, 1001, 2000, 5000, 7000, 10000, 19999, 20000, 20001, 30000, 100000, 1000000];
    let previous: Record<string, number> | undefined;
    for (const t of targets) {
      const now = numbers(deriveCapacity(t, inputs));
      if (previous) {
        for (const [k, v] of Object.entries(now)) expect({ target: t, [k]: v >= previous[k] }).toEqual({ target: t, [k]: true });
      }
      previous = now;
    }
  });

  test("every number stays inside AWS's limits, and every maximum at or above its minimum", () => {
    for (const t of [1, 3, 100, 2000, 10000, 30000, 1000000]) {
      const p = deriveCapacity(t, inputs);
      expect(p.senderMaxConcurrency).toBeGreaterThanOrEqual(ESM_MIN_CONCURRENCY);
      expect(p.senderMaxConcurrency).toBeLessThanOrEqual(ESM_MAX_CONCURRENCY);
      expect(p.relayParallelizationFactor).toBeGreaterThanOrEqual(1);
      expect(p.relayParallelizationFactor).toBeLessThanOrEqual(MAX_PARALLELIZATION_FACTOR);
      expect(p.apiThrottlingRateLimit).toBeLessThanOrEqual(API_MAX_RATE);
      expect(p.apiThrottlingBurstLimit).toBeLessThanOrEqual(API_MAX_BURST);
      for (const table of CAPACITY_TABLES) {
        for (const dim of ['read', 'write'] as const) {
          const r = p.tables[table][dim];
          expect(Number.isInteger(r.max)).toBe(true);
          expect(r.max).toBeGreaterThanOrEqual(r.min);
          expect(r.min).toBe(settings.capacity.minimum[table][dim]);
        }
      }
    }
    expect(deriveCapacity(1000000, inputs).apiThrottlingRateLimit).toBe(API_MAX_RATE);
  });

  test.each([0, -5, 1.5, NaN])('a target of %p is refused', (t) => {
    expect(() => deriveCapacity(t, inputs)).toThrow(/targetDeliveriesPerSecond/);
    expect(() => build({ targetDeliveriesPerSecond: t })).toThrow(/targetDeliveriesPerSecond/);
  });
});

describe('template.yaml takes the same numbers', () => {
  const t = samTemplate();

  test("TargetDeliveriesPerSecond: the sizes of SAM_SIZES, settings.json's target by default", () => {
    expect(t.Parameters!.TargetDeliveriesPerSecond).toMatchObject({ Type: 'Number', Default: settings.capacity.targetDeliveriesPerSecond });
    expect((t.Parameters!.TargetDeliveriesPerSecond as any).AllowedValues).toEqual([...SAM_SIZES]);
    expect((t.Parameters!.ReserveSenderConcurrency as any)).toMatchObject({ Default: String(settings.capacity.reserveSenderConcurrency), AllowedValues: ['true', 'false'] });
  });

  test.each([...SAM_SIZES])('CapacityBySize row %d is capacity.ts output for it', (size) => {
    expect(t.Mappings!.CapacityBySize[String(size)]).toEqual(samRow(deriveCapacity(size, inputs)));
  });

  test('CapacityBySize has a row for every allowed size and no other', () => {
    expect(Object.keys(t.Mappings!.CapacityBySize).sort()).toEqual(SAM_SIZES.map(String).sort());
  });

  test("TableCapacity holds settings.json's minima and target utilization", () => {
    const m = t.Mappings!.TableCapacity;
    for (const table of CAPACITY_TABLES) {
      expect(m[table]).toEqual({ ReadMin: settings.capacity.minimum[table].read, WriteMin: settings.capacity.minimum[table].write });
    }
    expect(m.scaling).toEqual({ TargetUtilizationPercent: settings.capacity.targetUtilizationPercent });
  });

  test('with ReserveSenderConcurrency false the sender reserves nothing; with an explicit SenderMaxConcurrency it reserves that', () => {
    const { normalizeValue } = require('./normalize');
    const reserved = (params: Record<string, unknown>) => {
      const tpl = samTemplate();
      for (const [k, v] of Object.entries(params)) (tpl.Parameters as any)[k].Default = v;
      return normalizeValue(tpl.Resources.SenderFunction.Properties.ReservedConcurrentExecutions, {}, tpl);
    };
    expect(reserved({})).toBe(100);
    expect(reserved({ ReserveSenderConcurrency: 'false' })).toBeUndefined();
    expect(reserved({ SenderMaxConcurrency: 50 })).toBe(50);
    expect(reserved({ TargetDeliveriesPerSecond: 10000 })).toBe(500);
  });
});

describe('the stack', () => {
  const senderReserved = (stack: TernStack) => {
    const json = Template.fromStack(stack).toJSON() as any;
    return json.Resources[stack.getLogicalId(stack.functions.sender.node.defaultChild as any)].Properties.ReservedConcurrentExecutions;
  };

  test('-c tern:targetDeliveriesPerSecond sizes everything; an explicit senderMaxConcurrency or API limit still wins, and the reservation follows it', () => {
    const s = build({}, { 'tern:targetDeliveriesPerSecond': '10000' });
    expect([s.config.senderMaxConcurrency, s.config.relayParallelizationFactor, s.config.apiThrottlingRateLimit]).toEqual([500, 2, 1000]);
    expect(senderReserved(s)).toBe(500);
    const o = build({ senderMaxConcurrency: 40, apiThrottlingRateLimit: 50 }, { 'tern:targetDeliveriesPerSecond': '10000' });
    expect([o.config.senderMaxConcurrency, o.config.apiThrottlingRateLimit, o.config.apiThrottlingBurstLimit]).toEqual([40, 50, 2000]);
    expect(senderReserved(o)).toBe(40);
    Template.fromStack(o).hasResourceProperties('AWS::Lambda::EventSourceMapping', { ScalingConfig: { MaximumConcurrency: 40 } });
  });

  test('reserveSenderConcurrency false (props or -c) reserves nothing', () => {
    expect(senderReserved(build({ reserveSenderConcurrency: false }))).toBeUndefined();
    expect(senderReserved(build({}, { 'tern:reserveSenderConcurrency': 'false' }))).toBeUndefined();
  });

  test("a reservation that would leave less than 100 of the account's quota unreserved stops the synth, unless the quota says it fits", () => {
    expect(() => build({}, { 'tern:targetDeliveriesPerSecond': '30000' })).toThrow(/must leave 100 of the account's Lambda concurrency quota/);
    expect(() => build({ lambdaConcurrencyQuota: 1099 }, { 'tern:targetDeliveriesPerSecond': '30000' })).toThrow(/lambdaConcurrencyQuota 1099/);
    expect(senderReserved(build({}, sizeContext(30000)))).toBe(1000);
    expect(senderReserved(build({ lambdaConcurrencyQuota: 1100 }, { 'tern:targetDeliveriesPerSecond': '30000' }))).toBe(1000);
    // A new account's small quota: deploy without the reservation.
    expect(senderReserved(build({ reserveSenderConcurrency: false, lambdaConcurrencyQuota: 10 }))).toBeUndefined();
    expect(() => build({ lambdaConcurrencyQuota: 10 })).toThrow(/reserveSenderConcurrency false/);
  });

  test('a target beyond what one mapping carries is synthesized with a warning naming what to do', () => {
    const big = build({}, sizeContext(30000));
    Annotations.fromStack(big).hasWarning('*', Match.stringLikeRegexp('carries 20000 deliveries/s.*provisioned pollers or more queues'));
    expect(Annotations.fromStack(build()).findWarning('*', Match.stringLikeRegexp('provisioned pollers'))).toHaveLength(0);
  });
});
