import { RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import { Construct } from 'constructs';
import { TableCapacity, TableCapacityMode, TableSettings, TernSettings } from '../settings';

export interface StorageProps {
  readonly settings: TernSettings;
  /** Keep the tables when the stack is deleted or a table is replaced. */
  readonly retainData: boolean;
  /** On-demand, or provisioned with auto scaling in the ranges of settings.capacity.tables. */
  readonly capacityMode: TableCapacityMode;
}

/**
 * The four DynamoDB tables. All are on-demand by default (or provisioned with
 * read and write auto scaling, `capacityMode`), encrypted with the AWS managed
 * key and have point-in-time recovery: the outbox and the attempt log are
 * the record of what was promised and what was done.
 */
export class Storage extends Construct {
  /** Written by the application in its own transactions; its stream (NEW_IMAGE) feeds the relay. */
  public readonly outbox: dynamodb.Table;
  /** Endpoints and subscriptions per tenant. */
  public readonly endpoints: dynamodb.Table;
  /** One item per delivery attempt (and a delivered marker per event and endpoint). */
  public readonly attempts: dynamodb.Table;
  /** Per-endpoint health, one item per endpoint: rolling-window counters, circuit state, next probe time. */
  public readonly health: dynamodb.Table;

  constructor(scope: Construct, id: string, props: StorageProps) {
    super(scope, id);
    const removalPolicy = props.retainData ? RemovalPolicy.RETAIN : RemovalPolicy.DESTROY;
    const t = props.settings.tables;
    const c = props.settings.capacity;
    const capacity = (table: TableCapacity) =>
      props.capacityMode === 'provisioned' ? { ...table, targetUtilizationPercent: c.targetUtilizationPercent } : undefined;
    this.outbox = this.table('Outbox', t.outbox, removalPolicy, capacity(c.tables.outbox));
    this.endpoints = this.table('Endpoints', t.endpoints, removalPolicy, capacity(c.tables.endpoints));
    this.attempts = this.table('Attempts', t.attempts, removalPolicy, capacity(c.tables.attempts));
    this.health = this.table('Health', t.health, removalPolicy, capacity(c.tables.health));
  }

  private table(
    id: string,
    s: TableSettings,
    removalPolicy: RemovalPolicy,
    provisioned?: TableCapacity & { targetUtilizationPercent: number },
  ): dynamodb.Table {
    const table = new dynamodb.Table(this, id, {
      partitionKey: { name: s.partitionKey, type: dynamodb.AttributeType.STRING },
      sortKey: s.sortKey ? { name: s.sortKey, type: dynamodb.AttributeType.STRING } : undefined,
      timeToLiveAttribute: s.ttlAttribute,
      stream: s.streamViewType ? dynamodb.StreamViewType[s.streamViewType] : undefined,
      billingMode: provisioned ? dynamodb.BillingMode.PROVISIONED : dynamodb.BillingMode.PAY_PER_REQUEST,
      // Provisioned tables start at the bottom of their auto scaling range.
      readCapacity: provisioned?.read.min,
      writeCapacity: provisioned?.write.min,
      encryption: dynamodb.TableEncryption.AWS_MANAGED,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      removalPolicy,
    });
    if (provisioned) {
      const target = { targetUtilizationPercent: provisioned.targetUtilizationPercent };
      table
        .autoScaleReadCapacity({ minCapacity: provisioned.read.min, maxCapacity: provisioned.read.max })
        .scaleOnUtilization(target);
      table
        .autoScaleWriteCapacity({ minCapacity: provisioned.write.min, maxCapacity: provisioned.write.max })
        .scaleOnUtilization(target);
    }
    return table;
  }
}
