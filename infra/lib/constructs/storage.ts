import { RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as kms from 'aws-cdk-lib/aws-kms';
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
  /**
   * One item per delivery attempt (and a state item per event and endpoint: the claim, the
   * delivered marker, and the listing of a waiting delivery in the `waiting` index).
   */
  public readonly attempts: dynamodb.Table;
  /** Per-endpoint health, one item per endpoint: rolling-window counters, circuit state, next probe time. */
  public readonly health: dynamodb.Table;
  /**
   * Seals endpoint secrets at rest (docs/security.md): it wraps the keyring's epoch keys
   * (kept wrapped in the endpoints table); the endpoint store encrypts each secret with
   * AES-256-GCM under a key derived from the epoch key for its tenant and endpoint. Only the
   * sender and the api function may Decrypt; the table alone reveals no secret. Rotation on
   * (yearly, by KMS; a keyring epoch is rotated with `tern endpoints encrypt-secrets --new-epoch`).
   */
  public readonly secretsKey: kms.Key;

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
    this.waitingIndexName = this.waitingIndex(t.attempts, capacity(c.tables.attempts));
    this.tenantIndexName = this.tenantIndex(t.health, capacity(c.tables.health));
    this.secretsKey = new kms.Key(this, 'EndpointSecretsKey', {
      description: 'Tern: seals endpoint secrets at rest (wraps the keyring epoch keys kept in the endpoints table)',
      enableKeyRotation: true,
      // Without the key the sealed secrets cannot be read: it lives as long as the endpoints table.
      removalPolicy,
    });
  }

  /** Name of the health table's index of a tenant's endpoints (settings.json tables.health.tenantIndex). */
  public readonly tenantIndexName: string;

  /**
   * The health table's KEYS_ONLY index of a tenant's endpoints (`tern endpoints health
   * --tenant`): every item carries its keys, and no update changes them, so it is written
   * once per endpoint. Provisioned tables give it the health table's ranges.
   */
  private tenantIndex(s: TableSettings, provisioned?: TableCapacity & { targetUtilizationPercent: number }): string {
    const i = s.tenantIndex;
    if (!i) throw new Error('settings.json: tables.health.tenantIndex is required');
    this.health.addGlobalSecondaryIndex({
      indexName: i.name,
      partitionKey: { name: i.partitionKey, type: dynamodb.AttributeType.STRING },
      sortKey: { name: i.sortKey, type: dynamodb.AttributeType.STRING },
      projectionType: dynamodb.ProjectionType.KEYS_ONLY,
      readCapacity: provisioned?.read.min,
      writeCapacity: provisioned?.write.min,
    });
    if (provisioned) {
      const target = { targetUtilizationPercent: provisioned.targetUtilizationPercent };
      this.health
        .autoScaleGlobalSecondaryIndexReadCapacity(i.name, { minCapacity: provisioned.read.min, maxCapacity: provisioned.read.max })
        .scaleOnUtilization(target);
      this.health
        .autoScaleGlobalSecondaryIndexWriteCapacity(i.name, { minCapacity: provisioned.write.min, maxCapacity: provisioned.write.max })
        .scaleOnUtilization(target);
    }
    return i.name;
  }

  /** Name of the attempts table's index of waiting deliveries (settings.json tables.attempts.waitingIndex). */
  public readonly waitingIndexName: string;

  /** ARN of that index: what the console and the operators may Query and Scan. */
  public get waitingIndexArn(): string {
    return `${this.attempts.tableArn}/index/${this.waitingIndexName}`;
  }

  /**
   * The sparse index of waiting deliveries on the attempts table: only state items listed
   * as waiting carry its keys, so it holds nothing else and a delivery that succeeds at
   * once never writes it. Provisioned tables give it the table's ranges (it is written at
   * most twice per retry, fewer times than the table).
   */
  private waitingIndex(s: TableSettings, provisioned?: TableCapacity & { targetUtilizationPercent: number }): string {
    const w = s.waitingIndex;
    if (!w) throw new Error('settings.json: tables.attempts.waitingIndex is required');
    this.attempts.addGlobalSecondaryIndex({
      indexName: w.name,
      partitionKey: { name: w.partitionKey, type: dynamodb.AttributeType.STRING },
      sortKey: { name: w.sortKey, type: dynamodb.AttributeType.NUMBER },
      projectionType: dynamodb.ProjectionType.INCLUDE,
      nonKeyAttributes: w.projectedAttributes,
      readCapacity: provisioned?.read.min,
      writeCapacity: provisioned?.write.min,
    });
    if (provisioned) {
      const target = { targetUtilizationPercent: provisioned.targetUtilizationPercent };
      this.attempts
        .autoScaleGlobalSecondaryIndexReadCapacity(w.name, { minCapacity: provisioned.read.min, maxCapacity: provisioned.read.max })
        .scaleOnUtilization(target);
      this.attempts
        .autoScaleGlobalSecondaryIndexWriteCapacity(w.name, { minCapacity: provisioned.write.min, maxCapacity: provisioned.write.max })
        .scaleOnUtilization(target);
    }
    return w.name;
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
