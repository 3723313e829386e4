import { Duration } from 'aws-cdk-lib';
import * as cw from 'aws-cdk-lib/aws-cloudwatch';
import { Construct } from 'constructs';
import { TernSettings } from '../settings';
import { Functions } from './functions';
import { TernMetrics } from './metrics';
import { Queues } from './queues';

export interface DashboardProps {
  readonly settings: TernSettings;
  readonly functions: Functions;
  readonly queues: Queues;
}

/** One CloudWatch dashboard: delivery health first, then the pipes that feed it. */
export class Dashboard extends Construct {
  public readonly dashboard: cw.Dashboard;

  constructor(scope: Construct, id: string, props: DashboardProps) {
    super(scope, id);
    const m = new TernMetrics(props.settings.metrics.namespace);
    const hour = Duration.hours(1);
    const fiveMin = Duration.minutes(5);
    const { dlq, delivery, relayFailures } = props.queues;

    this.dashboard = new cw.Dashboard(this, 'Dashboard', { defaultInterval: Duration.days(1) });
    this.dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Delivery success rate (%, hourly)',
        left: [m.successRate(hour)],
        leftYAxis: { min: 0, max: 100 },
        leftAnnotations: [{ value: props.settings.alarms.successRatePercent, label: 'alarm' }],
        width: 12,
      }),
      new cw.GraphWidget({
        title: 'Attempt latency (ms)',
        left: [
          m.metric('AttemptLatency', { statistic: 'p50', period: fiveMin, label: 'p50' }),
          m.metric('AttemptLatency', { statistic: 'p95', period: fiveMin, label: 'p95' }),
        ],
        width: 12,
      }),
    );
    this.dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Attempts, retries, dead letters',
        left: [
          m.metric('Attempts', { label: 'attempts' }),
          m.metric('AttemptsFailed', { label: 'failed' }),
          m.metric('Retries', { label: 'retries' }),
          m.metric('DeadLetters', { label: 'dead letters' }),
          m.metric('Duplicates', { label: 'duplicates skipped' }),
        ],
        width: 12,
      }),
      new cw.GraphWidget({
        title: 'DLQ and relay-failure depth',
        left: [
          dlq.metricApproximateNumberOfMessagesVisible({ statistic: cw.Stats.MAXIMUM, period: fiveMin, label: 'DLQ' }),
          relayFailures.metricApproximateNumberOfMessagesVisible({
            statistic: cw.Stats.MAXIMUM,
            period: fiveMin,
            label: 'relay failures',
          }),
        ],
        width: 12,
      }),
    );
    this.dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Relay and replay',
        left: [
          m.metric('EventsRelayed', { label: 'events relayed' }),
          m.metric('DeliveriesEnqueued', { label: 'deliveries enqueued' }),
          m.metric('Replayed', { label: 'replayed' }),
        ],
        width: 8,
      }),
      new cw.GraphWidget({
        title: 'Delivery queue oldest message (s)',
        left: [delivery.metricApproximateAgeOfOldestMessage({ statistic: cw.Stats.MAXIMUM, period: fiveMin })],
        width: 8,
      }),
      new cw.GraphWidget({
        title: 'Relay iterator age (ms)',
        left: [props.functions.relay.metric('IteratorAge', { statistic: cw.Stats.MAXIMUM, period: fiveMin })],
        width: 8,
      }),
    );
  }
}
