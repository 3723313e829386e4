import { Duration } from 'aws-cdk-lib';
import * as cw from 'aws-cdk-lib/aws-cloudwatch';

/**
 * The metrics the functions emit as CloudWatch Embedded Metric Format: all in
 * one namespace (settings metrics.namespace), dimension set [["Service"]].
 */
export const SERVICE_DIMENSION = { Service: 'tern' } as const;

export type TernMetricName =
  | 'Attempts'
  | 'AttemptsSucceeded'
  | 'AttemptsFailed'
  | 'OurFailures'
  | 'Retries'
  | 'DeadLetters'
  | 'Duplicates'
  | 'AttemptLatency'
  | 'EventsRelayed'
  | 'DeliveriesEnqueued'
  | 'Replayed'
  | 'MarkersLost'
  | 'PutBack'
  | 'PutBackByVisibility'
  | 'PutBackFailed';

/** Builds the Tern application metrics for alarms and the dashboard. */
export class TernMetrics {
  constructor(private readonly namespace: string) {}

  /** A Tern metric; `period` defaults to 5 minutes, `statistic` to Sum. */
  metric(metricName: TernMetricName, opts: { statistic?: string; period?: Duration; label?: string } = {}): cw.Metric {
    return new cw.Metric({
      namespace: this.namespace,
      metricName,
      dimensionsMap: { ...SERVICE_DIMENSION },
      statistic: opts.statistic ?? cw.Stats.SUM,
      period: opts.period ?? Duration.minutes(5),
      label: opts.label,
    });
  }

  /**
   * Percent of attempts that succeeded. FILL(succeeded, 0) keeps an hour in which
   * every attempt failed (so no AttemptsSucceeded was emitted) at 0 % instead of
   * no data; an hour without attempts has no data (the alarm treats that as fine).
   */
  successRate(period: Duration): cw.MathExpression {
    return new cw.MathExpression({
      expression: '100 * FILL(succeeded, 0) / attempts',
      usingMetrics: {
        succeeded: this.metric('AttemptsSucceeded', { period }),
        attempts: this.metric('Attempts', { period }),
      },
      period,
      label: 'Delivery success rate (%)',
    });
  }
}
