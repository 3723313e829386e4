import { Duration, Stack } from 'aws-cdk-lib';
import * as cw from 'aws-cdk-lib/aws-cloudwatch';
import { Construct } from 'constructs';
import { TernSettings } from '../settings';
import { Functions } from './functions';
import { TernMetrics } from './metrics';
import { AttemptInsights, ContributorInsightsWidget } from './operational';
import { Queues } from './queues';

export interface DashboardProps {
  readonly settings: TernSettings;
  readonly functions: Functions;
  readonly queues: Queues;
  /** The Contributor Insights rules over the sender's attempt log (shown at the bottom). */
  readonly insights: AttemptInsights;
}

/** One CloudWatch dashboard: delivery health first, then the pipes that feed it. */
export class Dashboard extends Construct {
  public readonly dashboard: cw.Dashboard;
  /** The dashboard's address in the CloudWatch console (alarm descriptions link to it). */
  public readonly url: string;

  constructor(scope: Construct, id: string, props: DashboardProps) {
    super(scope, id);
    const m = new TernMetrics(props.settings.metrics.namespace);
    const hour = Duration.hours(1);
    const fiveMin = Duration.minutes(5);
    const { dlq, delivery, relayFailures } = props.queues;

    this.dashboard = new cw.Dashboard(this, 'Dashboard', { defaultInterval: Duration.days(1) });
    const { region } = Stack.of(this);
    this.url = `https://${region}.console.aws.amazon.com/cloudwatch/home?region=${region}#dashboards:name=${this.dashboard.dashboardName}`;
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
    // The operator's console (functions/console) next to the DLQ graph: where the DLQ alarm
    // points (every alarm description links here).
    const consoleWidget = (widget: string, title: string, width: number, height: number) =>
      new cw.CustomWidget({
        functionArn: props.functions.console.functionArn,
        title,
        params: { widget },
        width,
        height,
        // Reading the DLQ takes seconds: not on every resize or time-range change.
        updateOnRefresh: true,
        updateOnResize: false,
        updateOnTimeRangeChange: false,
      });
    this.dashboard.addWidgets(
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
        width: 8,
        height: 8,
      }),
      consoleWidget('dead_letters', 'Dead letters (replay)', 16, 8),
    );
    this.dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Attempts, retries, dead letters',
        left: [
          m.metric('Attempts', { label: 'attempts' }),
          m.metric('AttemptsFailed', { label: 'failed' }),
          // Failed on our side (resolver, local resources, our TLS set-up): never
          // charged to an endpoint's health.
          m.metric('OurFailures', { label: 'failed on our side' }),
          m.metric('Retries', { label: 'retries' }),
          m.metric('DeadLetters', { label: 'dead letters' }),
          m.metric('Duplicates', { label: 'duplicates skipped' }),
          m.metric('MarkersLost', { label: 'markers lost' }),
        ],
        width: 8,
        height: 8,
      }),
      consoleWidget('endpoints', 'Endpoints: health, waiting, dead letters (enable)', 16, 8),
    );
    // What is waiting, per endpoint, with attempt numbers and due times (the ledger's waiting index).
    this.dashboard.addWidgets(consoleWidget('waiting', 'Waiting deliveries (per endpoint, due times)', 24, 8));
    this.dashboard.addWidgets(consoleWidget('event_lookup', 'Event lookup (attempt history)', 24, 6));
    // Is anything lost? `tern audit`'s answer for the last hour (every pair accounted for).
    this.dashboard.addWidgets(consoleWidget('audit', 'Is anything lost? (every pair of the last hour)', 24, 8));
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
    // Per-endpoint and per-tenant views from the sender's attempt log, without a metric per endpoint.
    this.dashboard.addWidgets(
      new ContributorInsightsWidget({
        ruleName: props.insights.failingEndpoints.attrRuleName,
        title: 'Top endpoints by failed attempts (tenant, endpoint)',
        width: 12,
        height: 6,
      }),
      new ContributorInsightsWidget({
        ruleName: props.insights.busiestTenants.attrRuleName,
        title: 'Top tenants by attempts',
        width: 12,
        height: 6,
      }),
    );
  }
}
